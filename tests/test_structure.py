"""The package's shape: imports run one way, and no module reaches into another's classes.

Read from the source (`ast`), so that a change that breaks the shape fails here
whether or not a test runs the line: a module that imports a private member of
another, reads a sublayer attribute of a class defined in another module
(`block.causal_self_attention.mha.output_dense`: renaming a sublayer would break
it silently), or imports against the direction text and layers -> models ->
training and inference -> pretrained -> cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

import keras
import pytest

import keras_transformer as kt
from tests.helpers import tiny_transformer

PACKAGE = Path(kt.__file__).parent
# The attributes of a NamedTuple's own API, which start with an underscore.
NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make"}
# What each package may import of the others (constants.py is everyone's).
MAY_IMPORT = {
    "layers": set(),
    "text": set(),
    "models": {"layers"},
    "training": {"layers", "models", "text"},
    "inference": {"layers", "models", "text", "training"},
    # Importers of published checkpoints: they build the model, its tokenizers and a run
    # directory (training's), and sit below the command line only.
    "pretrained": {"layers", "models", "text", "training", "inference"},
}
# The input pipeline: it batches ids, and must not load the model to do so.
PIPELINE = ("text/data.py", "text/prepared.py", "text/buckets.py")


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imported_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted module) of every import of the package, wherever it is written
    (a function's lazy import counts too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            found += [(node.lineno, name) for name in [node.module, *names]]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.startswith("keras_transformer.")]


def package_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in MAY_IMPORT else None


def test_the_packages_exist():
    for package in [*MAY_IMPORT, "cli"]:
        assert (PACKAGE / package / "__init__.py").is_file(), package


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_imports_run_one_way(package):
    """text and layers import neither training nor inference (nor the model); the
    model imports layers alone; training and inference sit above them."""
    wrong = []
    for path in (PACKAGE / package).rglob("*.py"):
        for line, name in imported_modules(parsed(path)):
            other = package_of(name)
            if other and other != package and other not in MAY_IMPORT[package]:
                wrong.append(f"{relative(path)}:{line} imports {name}")
            if name.split(".")[1] in ("cli", "tutorial", "demo", "evaluation", "plotting"):
                wrong.append(f"{relative(path)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_the_input_pipeline_imports_no_model():
    wrong = [
        f"{module}:{line} imports {name}"
        for module in PIPELINE
        for line, name in imported_modules(parsed(PACKAGE / module))
        if package_of(name) in ("models", "training", "inference")
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_a_private_member_of_another():
    """`from keras_transformer.x import _name`, or `module._name` of an imported module."""
    wrong = []
    for path in modules():
        tree = parsed(path)
        aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "keras_transformer"
            ):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        wrong.append(f"{relative(path)}:{node.lineno} imports {alias.name}")
                    aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                aliases.update(a.asname or a.name.split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.attr not in NAMED_TUPLE_API
                and isinstance(node.value, ast.Name)
                and node.value.id not in ("self", "cls")
                and (node.value.id in aliases or not _is_local(tree, node.value.id))
            ):
                wrong.append(f"{relative(path)}:{node.lineno} reads {node.value.id}.{node.attr}")
    assert not wrong, "\n".join(wrong)


def _is_local(tree, name):
    """Whether `name` is bound in the module by assignment or as an argument (an object
    of the module's own making), rather than imported."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            return True
    return False


def sublayer_attributes() -> dict[str, set[str]]:
    """Attribute name -> the modules whose classes hold a sublayer under that name, found
    by walking built models (every layer of the package is in one of them)."""
    models = [
        tiny_transformer(vocab_size=20, num_layers=1),
        tiny_transformer(vocab_size=20, num_layers=1, normalize_first=True, tie_embeddings=True),
    ]
    owners: dict[str, set[str]] = {}
    seen = set()

    def walk(layer):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        for name, value in vars(layer).items():
            values = value if isinstance(value, (list, tuple)) else [value]
            layers = [v for v in values if isinstance(v, keras.layers.Layer)]
            if not layers or name.startswith("_"):
                continue
            for klass in type(layer).__mro__:
                if klass.__module__.startswith("keras_transformer") and name in _assigned(klass):
                    owners.setdefault(name, set()).add(klass.__module__)
            for sublayer in layers:
                walk(sublayer)

    for model in models:
        walk(model)
    return owners


def _assigned(klass) -> set[str]:
    """Attribute names a class' own source assigns on `self` (or with setattr)."""
    import inspect

    tree = ast.parse(inspect.getsource(inspect.getmodule(klass)))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == klass.__name__:
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.ctx, ast.Store)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == "self"
                ):
                    names.add(inner.attr)
                if isinstance(inner, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "blocks_attribute" for t in inner.targets
                ):
                    names.add(inner.value.value)
    return names


def test_the_sublayer_walk_finds_the_decoder_blocks_sublayers():
    owners = sublayer_attributes()
    for name in ("causal_self_attention", "mha", "residual", "embedding", "dec_layers"):
        assert name in owners, name


def test_no_module_reads_a_sublayer_of_another_module_s_class():
    """`x.name` where `name` holds a sublayer of a class defined in another module, and
    `x` is not `self`: a rename there would break this module silently. A field of a
    `NamedTuple` the module defines is its own (`state.decoder`), whatever its name."""
    owners = sublayer_attributes()
    wrong = []
    for path in modules():
        module = "keras_transformer." + relative(path)[: -len(".py")].replace("/", ".")
        module = module.removesuffix(".__init__")
        tree = parsed(path)
        own_fields = _named_tuple_fields(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or node.attr not in owners:
                continue
            if node.attr in own_fields:
                continue
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                continue
            if module in owners[node.attr]:
                continue
            wrong.append(f"{relative(path)}:{node.lineno} reads .{node.attr}")
    assert not wrong, "\n".join(wrong)


def _named_tuple_fields(tree) -> set[str]:
    """The field names of the `NamedTuple` classes a module defines."""
    fields = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            isinstance(base, ast.Name) and base.id == "NamedTuple" for base in node.bases
        ):
            fields.update(
                item.target.id
                for item in node.body
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
            )
    return fields


# -- import circles ---------------------------------------------------------------------

# The modules of the command line that sit outside the package, beside it.
ENTRY_MODULES = ("keras_transformer_launcher", "keras_transformer_commands")


def module_files() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package and the entry modules."""
    files = {name: PACKAGE.parent / f"{name}.py" for name in ENTRY_MODULES}
    for path in modules():
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the project it imports by name. Every import counts,
    at module level or inside a function (a lazy import still closes a circle, only
    later). `from PACKAGE import name` names the module PACKAGE.name where that is a
    module, else PACKAGE itself. A package's `__init__`, which Python runs before any
    of its modules, is not counted as imported by them: only what the code names."""
    files = module_files()
    graph = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    found.add(dotted if dotted in files else node.module)
        graph[name] = {module for module in found if module in files and module != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle found by a depth-first walk, as the modules along it (first repeated)."""
    circles, done, path = [], set(), []

    def walk(module):
        path.append(module)
        for imported in sorted(graph[module]):
            if imported in path:
                circles.append(path[path.index(imported) :] + [imported])
            elif imported not in done:
                walk(imported)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            walk(module)
    return circles


def test_the_circle_finder_finds_circles_lazy_or_not():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles(graph) == [["a", "b", "c", "a"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
    # The graph reads function-level imports too, and names submodules.
    graph = import_graph()
    assert "keras_transformer.cli" in graph["keras_transformer_launcher"]  # lazy, in main()
    assert "keras_transformer.cli.train" in graph["keras_transformer.cli"]


def test_no_import_circle():
    """No module imports, through any chain, one that imports it back: the command
    table lives in keras_transformer_commands.py, read by the launcher and the parsers."""
    assert import_circles(import_graph()) == []


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for module in graph[todo.pop()] - seen:
            seen.add(module)
            todo.append(module)
    return seen


def test_preparing_data_does_not_import_the_training_run():
    """`prepare` learns tokenizers and writes shards; the training run reads them. The
    tokenizer files are `training.tokenizer_files`', which both use."""
    graph = import_graph()
    assert reachable({"a": {"b"}, "b": {"c"}, "c": set()}, "a") == {"b", "c"}
    imported = reachable(graph, "keras_transformer.training.prepare")
    assert "keras_transformer.training.tokenizer_files" in imported
    assert "keras_transformer.training.run" not in imported


def test_the_package_s_traced_functions_skip_autograph():
    """Every `tf.function` of the package is made with `autograph=False` (translator.py
    says why), whether written `tf.function`, `tensorflow.function` or imported by name."""
    missing = []
    for path in modules():
        tree = parsed(path)
        references = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and node.attr == "function"
            and isinstance(node.value, ast.Name)
            and node.value.id in ("tf", "tensorflow")
        ]
        without_autograph = {
            id(node.func)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and any(
                k.arg == "autograph"
                and isinstance(k.value, ast.Constant)
                and k.value.value is False
                for k in node.keywords
            )
        }
        # A bare `@tf.function` or a call without the keyword.
        missing += [
            f"{relative(path)}:{n.lineno}" for n in references if id(n) not in without_autograph
        ]
        # `function` imported from TensorFlow would escape the check above.
        missing += [
            f"{relative(path)}:{node.lineno} imports it by name"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("tensorflow")
            and any(alias.name == "function" for alias in node.names)
        ]
    assert missing == []
