"""The documentation: the site builds, docstrings name their arguments, links resolve,
and the code and commands of README.md and the guides run.

- `mkdocs build --strict` (mkdocs.yml; skipped only where mkdocs is not installed), and
  the links into generated pages resolved in the built site;
- every public name of `keras_transformer` and `keras_transformer.layers` has a
  docstring whose Args section names each of its arguments;
- every relative link of the repository's Markdown pages (README.md, docs/, the
  READMEs of benchmarks/, notebooks/, saved_models/, tests/) leads to a file, and its
  anchor to a heading of that file; docs/configuration.md is generated
  (docs/hooks.py), so only the site's own pages may link it; a page of docs/ links only
  within docs/, since the site has no other files;
- the fenced ```python and ```bash blocks of each guide (docs/*.md) and of README.md run
  in file order in a fresh process and a fresh directory: the python blocks in one
  namespace, the bash blocks with `bash -e` and this Python's bin directory first on
  PATH. A block whose first line is `# needs: WHAT` is skipped (WHAT: what the user
  brings that a test cannot: data, a server, the package registries);
- every command of those pages' bash blocks, skipped or not, is read as shell: each
  `keras-transformer` command is parsed by the command line's parser as written, and
  each model server command (docker's or tensorflow_model_server's) takes only the
  options of this file's tables, publishes the ports the page's REST and gRPC
  examples connect to and serves the models they name.

Every TrainConfig field's help line is tested in test_cli.py
(`test_every_setting_has_a_help_with_its_default`); here, that the generated
configuration page lists each field with it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

import keras_transformer
import keras_transformer.layers

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDES = sorted(DOCS.glob("*.md"))
# The pages the build generates (docs/hooks.py): they are no files in docs/.
GENERATED_PAGES = ("configuration.md",)
# A guide's blocks, all together, in seconds.
GUIDE_TIMEOUT = 900
NEEDS = "# needs:"


def _load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the site ------------------------------------------------------------------------


def test_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        reason = 'mkdocs is not installed (pip install -e ".[docs]", or the dev extra)'
        print(f"SKIPPED: {reason}")
        pytest.skip(reason)
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},  # the hook imports TensorFlow: quiet
        capture_output=True,
        text=True,
        timeout=600,
    )
    # Without TensorFlow's start-up lines, which its C++ logging prints whatever the level.
    noise = ("I0000 ", "W0000 ", "WARNING: All log messages before absl", "To enable the")
    output = "\n".join(
        line for line in (result.stdout + result.stderr).splitlines() if not line.startswith(noise)
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{output[-8000:]}"
    assert not (DOCS / "configuration.md").exists()  # generated in the build, not written
    page = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    for field in dataclasses.fields(keras_transformer.TrainConfig):
        assert f"<code>{field.name}</code>" in page, field.name
    reference = (site / "reference" / "layers" / "index.html").read_text(encoding="utf-8")
    for name in keras_transformer.layers.__all__:
        assert f'id="keras_transformer.layers.{name}"' in reference, name
    # The links into generated pages, resolved in the built site: the page is there, with
    # the anchor's id (test_relative_links_resolve reads the hook's Markdown instead).
    checked = 0
    for path in sorted(DOCS.rglob("*.md")):
        for line, target in links(path.read_text(encoding="utf-8")):
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / unquote(file_part)).resolve()
            if not file_part or linked.parent != DOCS or linked.name not in GENERATED_PAGES:
                continue
            built = site / linked.stem / "index.html"
            where = f"{path.relative_to(ROOT)}:{line}: {target}"
            assert built.is_file(), f"{where}: the built site has no {built.relative_to(site)}"
            html = built.read_text(encoding="utf-8")
            assert not anchor or f'id="{unquote(anchor)}"' in html, f"{where}: no id {anchor}"
            checked += 1
    assert checked, "no page links a generated page: is GENERATED_PAGES right?"


def test_configuration_page_lists_every_setting_with_its_help():
    from keras_transformer.cli.settings import setting_help

    text = _load_hooks().configuration_markdown()
    rows = re.findall(r"^\| `(\w+)`<br>`--([\w-]+)` \|(.*)$", text, re.MULTILINE)
    fields = [field.name for field in dataclasses.fields(keras_transformer.TrainConfig)]
    assert sorted(name for name, _, _ in rows) == sorted(fields)
    groups = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert groups == ["Data", "Tokenizer", "Optimisation", "Model"]
    helps = setting_help()
    for name, flag, rest in rows:
        assert flag == name.replace("_", "-")
        # The help's first words (before its default, which has a column), as escaped.
        help_text = re.sub(r" \(default: [^()]*\)$", "", helps[name])
        first_words = " ".join(help_text.split()[:3]).replace("<", "&lt;")
        assert first_words in rest, (name, rest)


# -- docstrings ----------------------------------------------------------------------

ARGS_HEADER = re.compile(r"^(?P<indent>\s*)(Args|Arguments|Parameters):\s*$")
ARG_ENTRY = re.compile(r"^(?P<names>\**\w+(?:\s*,\s*\**\w+)*)\s*(?:\([^)]*\))?\s*:")


def documented_arguments(docstring: str) -> set[str]:
    """The names the Args sections of a Google-style docstring describe."""
    names = set()
    lines = docstring.expandtabs().splitlines()
    for i, line in enumerate(lines):
        header = ARGS_HEADER.match(line)
        if not header:
            continue
        entry_indent = None
        for entry in lines[i + 1 :]:
            if not entry.strip():
                continue
            indent = len(entry) - len(entry.lstrip())
            if indent <= len(header.group("indent")):
                break
            if entry_indent is None:
                entry_indent = indent
            if indent == entry_indent:
                match = ARG_ENTRY.match(entry.strip())
                if match:
                    names.update(n.strip().lstrip("*") for n in match.group("names").split(","))
    return names


def _public_objects() -> dict[str, object]:
    objects = {}
    for module in (keras_transformer, keras_transformer.layers):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and id(obj) not in {id(o) for o in objects.values()}:
                objects[f"{module.__name__}.{name}"] = obj
    return objects


PUBLIC_OBJECTS = _public_objects()


@pytest.mark.parametrize("qualified_name", sorted(PUBLIC_OBJECTS))
def test_public_docstring_names_every_argument(qualified_name):
    obj = PUBLIC_OBJECTS[qualified_name]
    docstring = inspect.getdoc(obj) or ""
    if inspect.isclass(obj) and "__init__" in vars(obj) and obj.__init__.__doc__:
        docstring += "\n" + inspect.cleandoc(obj.__init__.__doc__)
    assert docstring.strip(), f"{qualified_name} has no docstring"
    parameters = [
        p.name
        for p in inspect.signature(obj).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if parameters:
        documented = documented_arguments(docstring)
        assert documented, f"{qualified_name}'s docstring has no Args section"
        missing = [name for name in parameters if name not in documented]
        assert not missing, f"{qualified_name}'s Args section does not name {missing}"


def test_documented_arguments_reads_google_style():
    docstring = inspect.cleandoc(
        """Summary.

        Args:
            a: int. The first.
                More about a: b is not an entry here.
            c (str): typed.
            d, e: floats. Two at once.
            **kwargs: base layer arguments.

        Returns:
            x: not an argument.
        """
    )
    assert documented_arguments(docstring) == {"a", "c", "d", "e", "kwargs"}


# -- links ---------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)"
)
LINK_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(?P<target>[^\s>]+)>?")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(?P<text>.*?)(?:\s+#+)?\s*$")
HTML_ID = re.compile(r"<a\s[^>]*(?:id|name)=[\"']([^\"']+)[\"']")
ATTR_ID = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")


@dataclasses.dataclass
class Block:
    info: str
    line: int  # of the block's first line of code, 1-based
    code: str


def split_markdown(text: str) -> tuple[list[tuple[int, str]], list[Block]]:
    """The lines outside fenced code blocks (with their numbers), and the blocks."""
    prose, blocks = [], []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body, start = [], i + 1
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        blocks.append(Block(opening.group("info").lower(), start + 1, "\n".join(body) + "\n"))
        i += 1
    return prose, blocks


def github_slug(text: str) -> str:
    """GitHub's heading anchor: lowercase, punctuation removed, each space a hyphen."""
    kept = "".join(
        ch for ch in text.strip().lower() if ch in " -_" or unicodedata.category(ch)[0] in "LNM"
    )
    return kept.replace(" ", "-")


def mkdocs_slug(text: str) -> str:
    """Python-Markdown's (mkdocs'): ASCII, punctuation removed, each run of spaces and
    hyphens one hyphen."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown page has, by GitHub's and by mkdocs' rule (with the
    suffixes of repeated headings: GitHub's -1, -2, mkdocs' _1, _2)."""
    found, seen = set(), {}
    prose, _ = split_markdown(text)
    for _, line in prose:
        found.update(HTML_ID.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        title = heading.group("text")
        explicit = ATTR_ID.search(title)
        if explicit:
            found.add(explicit.group(1))
            title = title[: explicit.start()]
        title = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link: its text
        title = re.sub(r"<[^>]+>", "", title)  # HTML tags
        for rule, separator in ((github_slug, "-"), (mkdocs_slug, "_")):
            slug = rule(title)
            count = seen.get((rule, slug), 0)
            seen[(rule, slug)] = count + 1
            found.add(slug if count == 0 else f"{slug}{separator}{count}")
    return found


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and image outside code."""
    prose, _ = split_markdown(text)
    found = []
    for number, line in prose:
        line = INLINE_CODE.sub("", line)
        found += [(number, m.group("target")) for m in LINK.finditer(line)]
        definition = LINK_DEFINITION.match(line)
        if definition:
            found.append((number, definition.group("target")))
    return found


@pytest.fixture(scope="module")
def generated_pages():
    return {DOCS / name: _load_hooks().configuration_markdown() for name in GENERATED_PAGES}


def _page_text(path: Path, generated: dict) -> str | None:
    """A linked page's text ("" for a file that is no Markdown page, such as an image);
    None if there is no such file."""
    if path in generated:
        return generated[path]
    if path.is_file():
        return path.read_text(encoding="utf-8") if path.suffix == ".md" else ""
    return None


# Every Markdown page of the repository: the site's (docs/) and those GitHub shows.
LINKED_FILES = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted(DOCS.rglob("*.md")),
    *sorted(
        p
        for d in ("benchmarks", "notebooks", "saved_models", "tests")
        for p in (ROOT / d).glob("*.md")
    ),
]


@pytest.mark.parametrize("path", LINKED_FILES, ids=[str(p.relative_to(ROOT)) for p in LINKED_FILES])
def test_relative_links_resolve(path, generated_pages):
    text = path.read_text(encoding="utf-8")
    broken = []
    for line, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{line}: {target}"
        # A generated page exists only in the built site: a page of the site may link it,
        # a page that GitHub shows (README.md, saved_models/README.md) may not.
        in_site = DOCS in path.parents
        linked_text = _page_text(linked, generated_pages if in_site else {})
        if linked_text is None and not linked.is_dir():
            why = " (generated in the built site only)" if linked in generated_pages else ""
            broken.append(f"{where} (no file {linked}{why})")
        elif DOCS in path.parents and DOCS not in linked.parents:
            broken.append(f"{where} (outside docs/: no page of the site; link it by URL)")
        elif anchor and linked_text is not None and unquote(anchor) not in anchors(linked_text):
            broken.append(f"{where} (no heading #{anchor} in {linked.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_anchor_rules():
    assert github_slug("Faults (faults.py)") == "faults-faultspy"
    assert mkdocs_slug("Faults (faults.py)") == "faults-faultspy"
    assert github_slug("`Translator` -- strings in") == "translator----strings-in"
    assert mkdocs_slug("`Translator` -- strings in") == "translator-strings-in"
    page = "# A\n\n## Serving under load\n\n```\n# not a heading\n```\n## Serving under load\n"
    assert {"serving-under-load", "serving-under-load-1", "serving-under-load_1"} <= anchors(page)
    assert "not-a-heading" not in anchors(page)
    assert links("[a](b.md#c) `[x](y.md)`\n```\n[d](e.md)\n```\n[f]: g.md\n") == [
        (1, "b.md#c"),
        (5, "g.md"),
    ]


# -- the guides' code ----------------------------------------------------------------

# Runs in the guide's directory: argv[1] is a JSON file [guide, [[language, line, code], ...]].
_GUIDE_RUNNER = r"""
import json, subprocess, sys, traceback
guide, blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__"}
for language, line, code in blocks:
    print(f"----- {guide}:{line} ({language})", flush=True)
    if language == "bash":
        status = subprocess.call(["bash", "-e", "-c", code])
        if status:
            print(f"FAILED: the bash block at {guide}:{line} exited with {status}", flush=True)
            sys.exit(1)
        continue
    try:
        exec(compile("\n" * (line - 1) + code, guide, "exec"), namespace)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            print(f"FAILED: the python block at {guide}:{line} exited with {stop.code}", flush=True)
            sys.exit(1)
    except BaseException:
        traceback.print_exc()
        print(f"FAILED: the python block at {guide}:{line} raised", flush=True)
        sys.exit(1)
"""


def runnable_blocks(path: Path) -> tuple[list[Block], list[str]]:
    """The guide's python and bash blocks to run, and what the skipped ones need."""
    _, blocks = split_markdown(path.read_text(encoding="utf-8"))
    run, needs = [], []
    for block in blocks:
        if block.info not in ("python", "bash"):
            continue
        first = block.code.lstrip("\n").split("\n", 1)[0].strip()
        if first.startswith(NEEDS):
            what = first[len(NEEDS) :].strip()
            assert what, f"{path.name}:{block.line}: `{NEEDS}` must say what the block needs"
            needs.append(f"{path.name}:{block.line}: {what}")
            continue
        run.append(block)
    return run, needs


# The pages whose code runs: the guides and the README.
CODE_PAGES = [*GUIDES, ROOT / "README.md"]
# What a page's blocks print, beyond their exit status: page -> (pattern, times it
# matches a line of the output). getting-started.md's tiny demo (`--examples 2`, the
# default run directory, export root and name) is the CLI's demo test: it exports, and
# translates held-out pairs with the export, each with its score and reference.
GUIDE_OUTPUT = {
    "getting-started.md": [
        (r"    -> .*\[(ok|differs); score -?\d+\.\d{3}; reference: .*\]", 2),
        (r"Exported the best checkpoint to saved_models/demo/1 \(TF Serving layout\)\.", 1),
        (r'Translate more: keras-transformer translate --model saved_models/demo "\.\.\."', 1),
    ],
}


@pytest.mark.parametrize("guide", CODE_PAGES, ids=[p.name for p in CODE_PAGES])
def test_guide_code_runs(guide, tmp_path):
    blocks, needs = runnable_blocks(guide)
    for line in needs:
        print(f"skipped {line}")
    if not blocks:
        return
    script = tmp_path / "blocks.json"
    work = tmp_path / "work"
    work.mkdir()
    name = str(guide.relative_to(ROOT))
    script.write_text(
        json.dumps([name, [[b.info, b.line, b.code] for b in blocks]]), encoding="utf-8"
    )
    bin_dir = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    try:
        result = subprocess.run(
            [sys.executable, "-c", _GUIDE_RUNNER, str(script)],
            cwd=work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=GUIDE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        pytest.fail(f"{name}'s blocks ran over {GUIDE_TIMEOUT} s:\n{output[-8000:]}")
    assert result.returncode == 0, f"{name}'s code failed:\n{result.stdout[-12000:]}"
    lines = result.stdout.splitlines()
    for pattern, times in GUIDE_OUTPUT.get(guide.name, []):
        found = sum(1 for line in lines if re.fullmatch(pattern, line))
        output = result.stdout[-8000:]
        assert found == times, f"{name}: {found} lines, not {times}, match {pattern}:\n{output}"


# -- the commands the pages show -----------------------------------------------------
#
# Every bash block of README.md and docs/ (those that run above and those that need what
# the user brings) is read as shell: each `keras-transformer` command is parsed by the
# command line's own parser, and each model server command (docker's or the binary's) is
# checked against the tables below and against the page's client examples.


# The ports the model server listens on inside the tensorflow/serving image (it starts
# `tensorflow_model_server --port=8500 --rest_api_port=8501`), and the flag that sets
# each on the binary: a page's gRPC examples need the first published, its REST ones the
# second.
SERVER_PORTS = {"grpc": (8500, "--port"), "rest": (8501, "--rest_api_port")}
# The model server flags the pages may use: name -> the form of its value (TF Serving's
# main.cc). A flag not here is a typo or a new flag to check there and add.
MODEL_SERVER_FLAGS = {
    "--port": r"\d+",
    "--rest_api_port": r"\d+",
    "--model_config_file": r"/\S+",
    "--model_config_file_poll_wait_seconds": r"\d+",
    "--model_name": r"\w+",
    "--model_base_path": r"/\S+",
    "--tensorflow_inter_op_parallelism": r"\d+",
    "--tensorflow_intra_op_parallelism": r"\d+",
    "--xla_cpu_compilation_enabled": r"true|false",
    "--enable_batching": r"true|false",
    "--batching_parameters_file": r"/\S+",
    "--rest_api_num_threads": r"\d+",
}
# `docker run`'s options the pages may use: name -> whether it takes a value.
DOCKER_RUN_OPTIONS = {"--rm": False, "-d": False, "-it": False, "-p": True, "-v": True, "-e": True}
SERVING_IMAGE = re.compile(r"^tensorflow/serving(:[\w.-]+)?$")
# Where a page's client examples connect: (protocol, port, model name).
REST_CALL = re.compile(r"localhost:(\d+)/v1/models/(\w+)")
GRPC_CHANNEL = re.compile(r"insecure_channel\(\s*[\"']localhost:(\d+)[\"']")
GRPC_MODEL = re.compile(r"model_spec\.name\b[^\n]*?=\s*[\"'](\w+)[\"']")
CONFIG_NAME = re.compile(r"^\s*name:\s*\"(\w+)\"", re.MULTILINE)
CONFIG_BASE_PATH = re.compile(r"^\s*base_path:\s*\"([^\"]+)\"", re.MULTILINE)


def _without_comments(text: str) -> str:
    """Shell text without its comments: an unquoted # that starts a word, to the line's end."""
    out, quote, i = [], None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            out.append(text[i : i + 2])
            i += 2
            continue
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a bash block as argument lists: continued lines joined,
    here-documents' bodies, comments, redirections and leading VAR=value assignments
    left out, split at newlines, `;`, `&&`, `||`, `|` and `&`."""
    lines, heredoc = [], None
    for line in code.splitlines():
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        start = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        heredoc = start.group(1) if start else None
        lines.append(line)
    text = _without_comments("\n".join(lines)).replace("\\\n", " ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    commands, current, tokens = [], [], list(lexer)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token and set(token) <= set("();<>|&\n"):
            if "<" in token or ">" in token:  # a redirection: it and its target go
                if current and current[-1].isdigit():
                    current.pop()  # 2>/dev/null
                i += 2
                continue
            commands.append(current)
            current = []
        else:
            current.append(token)
        i += 1
    commands.append(current)
    result = []
    for command in commands:
        while command and re.match(r"^\w+=", command[0]):
            command = command[1:]
        if command:
            result.append(command)
    return result


def test_shell_commands_reads_bash_as_bash():
    code = textwrap.dedent(
        """\
        # a comment: it's here
        KERAS_BACKEND=jax keras-transformer train --data d \\
            --run-dir r   # trailing comment
        cat > tiny.json <<'EOF'
        {"a": 1}
        EOF
        ls runs 2>/dev/null || echo "no run" && curl -d '{"x":
          1}' url
        keras-transformer train --src a.en & sleep 1; kill -9 $!
        """
    )
    assert shell_commands(code) == [
        ["keras-transformer", "train", "--data", "d", "--run-dir", "r"],
        ["cat"],
        ["ls", "runs"],
        ["echo", "no run"],
        ["curl", "-d", '{"x":\n  1}', "url"],
        ["keras-transformer", "train", "--src", "a.en"],
        ["sleep", "1"],
        ["kill", "-9", "$!"],
    ]


def _page_commands(path: Path) -> list[tuple[int, list[str]]]:
    """(block line, argument list) of every command of the page's bash blocks."""
    _, blocks = split_markdown(path.read_text(encoding="utf-8"))
    return [
        (block.line, command)
        for block in blocks
        if block.info in ("bash", "sh", "shell")
        for command in shell_commands(block.code)
    ]


@pytest.fixture(scope="module")
def cli_parser():
    from keras_transformer.cli import build_parser

    return build_parser()


@pytest.mark.parametrize("page", CODE_PAGES, ids=[str(p.relative_to(ROOT)) for p in CODE_PAGES])
def test_documented_commands_parse(page, cli_parser, capsys):
    """Each `keras-transformer` command of the page is one the command line takes as
    written (its subcommand, its flags, their values and the required ones): parsed by
    the real parser, without running it (the blocks that run, run above)."""
    bad = []
    for line, command in _page_commands(page):
        if os.path.basename(command[0]) != "keras-transformer":
            continue
        try:
            cli_parser.parse_args(command[1:])
        except SystemExit as stop:
            if stop.code not in (None, 0):  # --help ends with 0
                error = capsys.readouterr().err.strip().splitlines()[-1:]
                bad.append(f"{page.name}:{line}: {shlex.join(command)}\n    {error}")
    assert not bad, "commands the command line refuses:\n" + "\n".join(bad)


def _server_command(command: list[str]) -> dict | None:
    """A model server command read: its published ports (container -> host), mounts
    (container -> host), environment and model server flags; None for another command.
    Options outside the tables are an error."""
    program = os.path.basename(command[0])
    if program == "tensorflow_model_server":
        flags, rest = command[1:], []
        ports = None  # the binary listens on its flags' ports
        mounts, environment = {}, {}
    elif program == "docker" and command[1:2] == ["run"]:
        ports, mounts, environment = {}, {}, {}
        args = command[2:]
        while args and args[0].startswith("-"):
            option = args.pop(0)
            assert option in DOCKER_RUN_OPTIONS, f"docker run {option}: not in DOCKER_RUN_OPTIONS"
            if not DOCKER_RUN_OPTIONS[option]:
                continue
            value = args.pop(0)
            if option == "-p":
                host, container = value.rsplit(":", 1)[-2:] if value.count(":") else (value, value)
                ports[int(container)] = int(host.rsplit(":", 1)[-1])
            elif option == "-v":
                host, container = value.split(":")[:2]
                mounts[container] = host
            else:
                name, _, setting = value.partition("=")
                environment[name] = setting
        image, *rest = args
        assert SERVING_IMAGE.match(image), f"docker run {image}: not the tensorflow/serving image"
        flags = rest
    else:
        return None
    server_flags = {}
    for flag in flags:
        name, _, value = flag.partition("=")
        assert name in MODEL_SERVER_FLAGS, f"{flag}: not in MODEL_SERVER_FLAGS"
        assert re.fullmatch(MODEL_SERVER_FLAGS[name], value), f"{flag}: not {name}'s form"
        server_flags[name] = value
    if ports is None:  # the binary: its defaults are the image's
        ports = {port: int(server_flags.get(flag, port)) for port, flag in SERVER_PORTS.values()}
    return {"ports": ports, "mounts": mounts, "environment": environment, "flags": server_flags}


def test_server_commands_serve_what_the_examples_ask():
    """Each page's model server commands publish the ports its REST and gRPC examples
    connect to, and serve the models they name (MODEL_NAME, or the page's model config,
    found under a mounted directory)."""
    checked = []
    for page in CODE_PAGES:
        text = page.read_text(encoding="utf-8")
        servers = [
            (line, server)
            for line, command in _page_commands(page)
            if (server := _server_command(command)) is not None
        ]
        asked = [("rest", int(port), name) for port, name in REST_CALL.findall(text)]
        channels = [int(port) for port in GRPC_CHANNEL.findall(text)]
        asked += [("grpc", port, name) for port in channels for name in GRPC_MODEL.findall(text)]
        if not servers:
            continue
        _, prose_blocks = split_markdown(text)
        configs = "\n".join(b.code for b in prose_blocks if "model_config_list" in b.code)
        for line, server in servers:
            where = f"{page.relative_to(ROOT)}:{line}"
            if "--model_config_file" in server["flags"]:
                served = set(CONFIG_NAME.findall(configs))
                paths = [server["flags"]["--model_config_file"], *CONFIG_BASE_PATH.findall(configs)]
            else:
                served = {server["environment"].get("MODEL_NAME", "model")}
                paths = [f"/models/{name}" for name in served]
            if server["mounts"]:  # docker: the server reads only what is mounted
                for path in paths:
                    assert any(
                        path == mount or path.startswith(mount.rstrip("/") + "/")
                        for mount in server["mounts"]
                    ), f"{where}: {path} is under no mount of {server['mounts']}"
            for protocol, port, name in asked:
                container_port, flag = SERVER_PORTS[protocol]
                assert server["ports"].get(container_port) == port, (
                    f"{where}: the {protocol} examples connect to {port}, but the command "
                    f"publishes {server['ports']} (container -> host; {protocol} is "
                    f"{container_port}, {flag})"
                )
                assert name in served, f"{where}: the examples ask {name}, it serves {served}"
            checked.append(page.name)
    assert {"README.md", "getting-started.md", "serving.md"} <= set(checked), checked


def test_documented_exports_write_where_they_say(tiny_run_dir, tmp_path, monkeypatch, capsys):
    """Each `keras-transformer export` line of the pages runs as written, in a fresh
    directory where its run directory is the tiny run, and writes the version its comment
    names (`# saved_models/en_de/1/`). Writing the SavedModel is patched out, so no
    signature is traced (test_export.py tests what an export holds): what runs is the
    command, the run's loading and the translator's construction."""
    from keras_transformer import cli
    from keras_transformer.inference import export

    def save(obj, path, signatures=None, **kwargs):
        assert len(signatures) == 6
        Path(path, "saved_model.pb").write_bytes(b"stub")

    monkeypatch.setattr(export.tf.saved_model, "save", save)
    ran = []
    for page in CODE_PAGES:
        _, blocks = split_markdown(page.read_text(encoding="utf-8"))
        for block in blocks:
            for offset, text in enumerate(block.code.splitlines()):
                if not re.match(r"^(\w+=\S+\s+)*keras-transformer export\b", text):
                    continue
                where = f"{page.relative_to(ROOT)}:{block.line + offset}"
                assert not text.rstrip().endswith("\\"), f"{where}: write it on one line"
                (argv,) = shell_commands(text)
                work = tmp_path / f"{page.stem}-{block.line + offset}"
                run = work / argv[2]
                run.parent.mkdir(parents=True)
                run.symlink_to(tiny_run_dir, target_is_directory=True)
                monkeypatch.chdir(work)
                capsys.readouterr()
                assert cli.main(argv[1:]) == 0, where
                written = Path(capsys.readouterr().out.strip())
                assert (written / "saved_model.pb").read_bytes() == b"stub", where
                expected = re.search(r"#\s*(saved_models/[\w/]+)", text)
                if expected:
                    assert written == Path(expected.group(1)), where
                ran.append(where)
    assert sum(where.startswith("README.md:") for where in ran) == 2, ran
