"""The package's structure as docs/architecture.md states it, read from the source: no import circle, model
code without TensorFlow, and generic code that names no family and no transformers tokenizer class."""

import ast
import re
from pathlib import Path

import pytest

from keras_bertology.models.registry import FAMILIES

PACKAGE = Path(__file__).resolve().parents[2] / "keras_bertology"
# The generic code, which iterates over what families declare (docs/architecture.md); study/arms.py is the
# study's table of its arms, which names them as a preset names its family.
GENERIC = ("convert", "engine", "pretraining", "export", "finetune", "prepare", "data", "outputs", "tokenizers",
           "cli.py", "runs.py", "preset_loading.py", "models/family.py", "models/registry.py", "models/backbone.py",
           "models/pretrainer.py", "models/task_models.py")
# Strings that spell a family's name and mean something else.
NOT_A_FAMILY = {("data/corpus.py", "bert"),  # the corpus format of BERT's original data (--corpus-format bert)
                ("models/registry.py", "bert"),  # the model `bertology pretrain` trains when none is named
                # ONNX Runtime Extensions' operator of that name, which byte-level BPE's string model runs
                ("tokenizers/byte_bpe.py", "GPT2Tokenizer")}


def module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules():
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path, known, top_level_only=False):
    """The modules of this package that `path` imports, at any depth (a function's import counts: it runs
    whenever the function does), or only those its own import runs. `from package import name` is the module
    package.name where that exists."""
    found = set()
    for node in (import_time_nodes if top_level_only else ast.walk)(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def circles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(start):
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter[0]
                    counter[0] += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_time_nodes(tree):
    """The nodes that importing a module runs: all but the bodies of its functions."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        todo += [child for child in ast.iter_child_nodes(node)
                 if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]


def import_graph(top_level_only=False):
    modules = source_modules()
    graph = {}
    for name, path in modules.items():
        # A package's __init__ is imported by its submodules' import: an edge to the parent package is not a
        # dependency the submodule chose, so it is left out (the parent's own imports still count).
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = imported_modules(path, modules, top_level_only) - parents - {name}
    return graph


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(circle) for circle in found)


def test_the_circle_finder_finds_a_circle_of_three_and_ignores_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def model_code():
    """The modules a model is built from: layers/, every family's backbone and pretrainer, and what importing
    them imports of this package (a family's folder also holds its tf.data stages, which are input pipelines;
    `from_preset` loads a tokenizer when called)."""
    graph = import_graph(top_level_only=True)
    roots = {name for name in graph if name.startswith("keras_bertology.layers")}
    roots |= {path.split(":")[0] for family in FAMILIES.values()
              for path in (family.backbone_path, family.pretrainer_path)}
    found, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += graph[name]
    return found


def test_model_code_imports_keras_and_never_tensorflow():
    """Model code runs on JAX too (the GPU path): it is written in keras and keras.ops only."""
    modules = source_modules()
    code = model_code()
    assert "keras_bertology.layers.attention" in code and "keras_bertology.models.bert.backbone" in code
    offenders = []
    for name in sorted(code):
        for node in ast.walk(ast.parse(modules[name].read_text(), str(modules[name]))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{name}: {imported}" for imported in names
                          if imported.split(".")[0] in ("tensorflow", "tensorflow_text")]
    assert not offenders


def declared_names():
    """Every family's name and every transformers tokenizer class a family declares it reads or writes."""
    names = set(FAMILIES)
    for family in FAMILIES.values():
        names.update(family.hf_tokenizer.classes if family.hf_tokenizer else ())
    return names


def string_constants(path):
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def generic_files():
    for name in GENERIC:
        path = PACKAGE / name
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def test_generic_code_names_no_family_and_no_transformers_tokenizer_class():
    """A new family is its own folder: the generic layers ask the family record, never compare its name."""
    declared = declared_names()
    assert {"bert", "BertTokenizer"} <= declared  # the check reads what families declare
    declared |= {f"{name}Fast" for name in declared}  # transformers' fast twin of a tokenizer class
    offenders = [f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
                 for path in generic_files() for node in string_constants(path) if node.value in declared
                 and (path.relative_to(PACKAGE).as_posix(), node.value) not in NOT_A_FAMILY]
    assert not offenders


# docs/architecture.md's layers, bottom up: a module imports from its own layer and those below.
LAYERS = (
    ("errors", "flag_ranges", "atomic", "folder_lock", "output_paths", "lazy_imports", "extras", "runtime",
     "native_logs", "supervise", "keras_archives", "paired_seeds"),
    ("layers",), ("engine",), ("data",), ("tokenizers",), ("models",), ("runs",), ("convert",), ("preset_loading",),
    ("outputs",), ("export",), ("pretraining",), ("finetune", "prepare", "probing", "probe_encoder"), ("study",), ("cli",), ("cli_reference",),
)
# The two calls up that the design makes: `from_preset` on the base classes loads through preset_loading when
# called, and a family's converter and tokenizer format use convert/'s helpers.
UPWARD_CALLS = ((r"keras_bertology\.", r"keras_bertology\.preset_loading$"),
                (r"keras_bertology\.models\.\w+\.(convert|hf_tokenizer)$",
                 r"keras_bertology\.convert\.(hf_export|hf_weights|hf_tokenizer)$"))


def layer_of(module):
    unit = module.split(".")[1] if "." in module else ""
    ranks = [rank for rank, units in enumerate(LAYERS) if unit in units]
    assert ranks or not unit, f"{module}: its folder is in no layer of LAYERS (docs/architecture.md)"
    return ranks[0] if ranks else -1  # the package's face imports nothing


def upward_imports(graph):
    return sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                  if layer_of(target) > layer_of(source)
                  and not any(re.match(a, source) and re.match(b, target) for a, b in UPWARD_CALLS))


def test_each_layer_imports_only_its_own_and_the_layers_below():
    assert not upward_imports(import_graph())


def test_an_import_up_a_layer_is_found():
    graph = {"keras_bertology.data.masking": {"keras_bertology.pretraining.pretrain"},
             "keras_bertology.models.bert.convert": {"keras_bertology.convert.hf_weights"}}
    assert upward_imports(graph) == ["keras_bertology.data.masking -> keras_bertology.pretraining.pretrain"]


def test_fine_tuning_trains_with_the_engine_and_imports_nothing_of_pretraining():
    """engine/ is what pretraining and fine-tuning share; pretraining/ is pretraining's own."""
    graph = import_graph()
    finetune = {name: targets for name, targets in graph.items() if name.startswith("keras_bertology.finetune")}
    assert any(target.startswith("keras_bertology.engine.") for targets in finetune.values() for target in targets)
    assert not sorted(f"{name} -> {target}" for name, targets in finetune.items() for target in targets
                      if target.startswith("keras_bertology.pretraining"))
