"""The documentation: the site builds, docstrings name their arguments, links resolve,
and the guides' code runs.

- `mkdocs build --strict` (mkdocs.yml; skipped only where mkdocs is not installed);
- every public name of `keras_transformer` and `keras_transformer.layers` has a
  docstring whose Args section names each of its arguments;
- every relative link of README.md and docs/ leads to a file, and its anchor to a
  heading of that file (docs/configuration.md is generated: docs/hooks.py); a page of
  docs/ links only within docs/, since the site has no other files;
- the fenced ```python and ```bash blocks of each guide (docs/*.md) run in file order
  in a fresh process and a fresh directory: the python blocks in one namespace, the
  bash blocks with `bash -e` and this Python's bin directory first on PATH. A block
  whose first line is `# needs: WHAT` is skipped (WHAT: why it cannot run here).

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
import subprocess
import sys
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


@pytest.mark.parametrize("guide", GUIDES, ids=[p.name for p in GUIDES])
def test_guide_code_runs(guide, tmp_path):
    blocks, needs = runnable_blocks(guide)
    for line in needs:
        print(f"skipped {line}")
    if not blocks:
        return
    script = tmp_path / "blocks.json"
    work = tmp_path / "work"
    work.mkdir()
    name = f"docs/{guide.name}"
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
