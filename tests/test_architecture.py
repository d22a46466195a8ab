"""refinery's modules along their layers: each imports alone in a fresh interpreter, the import graph (top-level
and function-level imports alike) has no cycle and no import of a higher layer, and io/ and core/ import
refinery's own modules at the top of the file only (a function-level import there would hide a cycle)."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import refinery

ROOT = Path(refinery.__file__).resolve().parent
# lowest first: a module may import its own layer and those before it (core stands on io: the spill runs, the
# schema; report draws core's statistics; models on pipeline: models.actors maps generators with pipeline.engine's
# actor pool)
LAYERS = ("refinery", "refinery.io", "refinery.core", "refinery.report", "refinery.pipeline", "refinery.models",
          "refinery.methods", "refinery.api", "refinery.cli", "refinery.testing")   # testing runs the verbs
TOP_ONLY = ("refinery.io", "refinery.core", "refinery.report")   # layers whose own imports are all at the top of the file


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


def _layer(module: str) -> int:
    return max(i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def _imports(module: str, path: Path):
    """(imported refinery module, line, whether inside a function) of each import in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def targets(node):
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
        return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in targets(child):
                    if target in MODULES:
                        yield target, child.lineno, in_function
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                      ast.Lambda)))

    yield from walk(ast.parse(path.read_text(), str(path)), False)


EDGES = [(module, target, line, in_function) for module, path in MODULES.items()
         for target, line, in_function in _imports(module, path)]


def _where(module: str, line: int) -> str:
    return f"{MODULES[module].relative_to(ROOT.parent)}:{line}"


# Imports each module of ``sys.argv`` in a child of its own, forked from this process (the third-party libraries
# loaded once, before: a module must still import each it uses itself), two at a time; prints each that fails.
FORKED_IMPORTS = """
import importlib, os, sys
for lib in ("numpy", "pyarrow", "pyarrow.compute", "pyarrow.parquet", "pyarrow.dataset", "duckdb", "click", "yaml",
            "fsspec", "numba", "scipy.sparse", "pandas"):
    importlib.import_module(lib)
running = {}

def reap():
    pid, status = os.wait()
    module = running.pop(pid)
    if status:
        print(module)

for module in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(module)
        except BaseException as e:
            sys.stderr.write(f"{module}: {type(e).__name__}: {e}\\n")
            os._exit(1)
        os._exit(0)
    running[pid] = module
    if len(running) >= 2:
        reap()
while running:
    reap()
"""


def test_every_module_imports_alone():
    """Each module imports in an interpreter that has imported no other module of refinery (a child forked from
    one that loaded only third-party libraries), so no module depends on another having been imported first."""
    planted = "refinery.no_such_module"
    proc = subprocess.run([sys.executable, "-c", FORKED_IMPORTS, *MODULES, planted], capture_output=True, text=True)
    failed = proc.stdout.split()
    assert planted in failed, proc.stderr[-2000:]
    failed.remove(planted)
    details = [line for line in proc.stderr.splitlines() if line.split(":")[0] in failed]
    assert not failed, "modules that do not import alone in a fresh interpreter:\n" + "\n".join(details)


def test_no_import_cycles():
    graph = nx.DiGraph()
    for module, target, line, _ in EDGES:
        if module != target:
            graph.add_edge(module, target, where=_where(module, line))
    cycles = []
    for component in nx.strongly_connected_components(graph):
        if len(component) > 1:
            cycle = nx.find_cycle(graph.subgraph(component))
            cycles.append(f"{', '.join(sorted(component))}; for one: " + " -> ".join(a for a, _ in cycle)
                          + f" -> {cycle[0][0]} ({', '.join(graph.edges[a, b]['where'] for a, b in cycle)})")
    assert not cycles, "modules in an import cycle (function-level imports included):\n" + "\n".join(cycles)


def test_no_upward_imports():
    upward = [f"{_where(module, line)}: {module} ({LAYERS[_layer(module)]}) imports {target} "
              f"({LAYERS[_layer(target)]}, a higher layer)"
              for module, target, line, _ in EDGES if _layer(target) > _layer(module)]
    assert not upward, f"imports of a higher layer (order: {' < '.join(LAYERS)}):\n" + "\n".join(upward)


def _method(module: str) -> str | None:
    """The method package ``module`` belongs to (``refinery.methods.NAME…``), or None."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["refinery", "methods"] and len(parts) > 2 else None


def _crossing(edges) -> list[str]:
    return [f"{module} imports {target}" + (f" ({_where(module, line)})" if module in MODULES else "")
            for module, target, line, _ in edges
            if _method(module) and _method(target) and _method(module) != _method(target)]


def test_no_method_package_imports_another(tmp_path):
    """Issue 63: a method package stands on the layers below it (core, io, models, pipeline), never on another
    method: what two methods share lives down there (the audit's counting in core, evaluation sets and task models in
    models, MinHash and the n-gram index in core). Function-level imports count too. The check must find a planted
    one."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from refinery.methods.audit.counting import audit\n    return audit\n")
    found = _crossing((m, t, line, inside) for t, line, inside in [*_imports("refinery.methods.zfilter.planted",
                                                                             planted)]
                      for m in ["refinery.methods.zfilter.planted"])
    assert found == ["refinery.methods.zfilter.planted imports refinery.methods.audit.counting"]
    crossing = _crossing(EDGES)
    assert not crossing, "method packages importing another:\n" + "\n".join(crossing)


# what opens a corpus (reads its rows by itself), writes one or commits: the executors' (pipeline/) and io's work
CORPUS_OPENERS = {"load_rows", "load_input", "split_corpora", "corpora_rejects", "corpus_features", "iter_input_batches",
                  "write_corpus", "commit"}


def _calls(tree: ast.AST):
    """(call, the name it calls, the name of its receiver or "") of each call in ``tree``: ``fs.open(…)`` gives
    ("open", "fs"), ``load(…)`` ("load", "")."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            yield node, name, func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                else ""


def _corpus_openings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each call in ``tree`` that opens a corpus, writes one or commits: a call of one of
    ``CORPUS_OPENERS``, ``Corpus.open``, ``out.corpus(…)``, ``source.load()``, or io.corpus's ``load``."""
    loads = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "refinery.io.corpus"
             for a in n.names if a.name == "load"}
    return [(node.lineno, f"{receiver + '.' if receiver else ''}{name}(…)") for node, name, receiver in _calls(tree)
            if name in CORPUS_OPENERS or (receiver, name) in {("Corpus", "open"), ("out", "corpus"), ("source", "load")}
            or (isinstance(node.func, ast.Name) and name in loads)]


def test_no_method_module_opens_a_corpus():
    """Issue 63: a stage declares its kind and its pure functions; reading its input, writing its corpora and the
    commit are its executor's (pipeline/: filters, map stages, table stages), its input's (``StageInput``: batches,
    units, side corpora) and io's. No module under methods/ opens a corpus, writes one or commits. The check must
    find a planted opening."""
    planted = ast.parse("from refinery.io.corpus import load as read\n"
                        "def f(source, out, con):\n    rows = read(['x'])\n    out.corpus('kept').commit()\n"
                        "    return source.load(), queries.load_input(con, {}, None, None)\n")
    assert {what for _, what in _corpus_openings(planted)} == {"read(…)", "commit(…)", "out.corpus(…)",
                                                               "source.load(…)", "queries.load_input(…)"}
    opening = {module: _corpus_openings(ast.parse(path.read_text())) for module, path in MODULES.items()
               if module.startswith("refinery.methods.")}
    found = [f"{_where(module, line)}: {what}" for module, calls in opening.items() for line, what in calls]
    assert not found, "method modules that open, write or commit a corpus themselves:\n" + "\n".join(found)


def test_no_stage_runs_itself():
    """Issue 63: every stage declares its kind (a filter, a map, a table stage) and is run by that kind's executor:
    no class under methods/ defines ``run``."""
    found = [f"{_where(module, fn.lineno)}: {cls.name}.run" for module, path in MODULES.items()
             if module.startswith("refinery.methods.") for cls in ast.walk(ast.parse(path.read_text()))
             if isinstance(cls, ast.ClassDef) for fn in cls.body
             if isinstance(fn, ast.FunctionDef) and fn.name == "run"]
    assert not found, "stages that run themselves:\n" + "\n".join(found)


def test_io_and_core_import_refinery_at_the_top():
    hidden = [f"{_where(module, line)}: {module} imports {target} inside a function"
              for module, target, line, in_function in EDGES
              if in_function and any(module.startswith(layer + ".") for layer in TOP_ONLY)]
    assert not hidden, "function-level imports of refinery's modules in io/ or core/:\n" + "\n".join(hidden)


# ---------------------------------------------------------------- one output contract (issue 42)

WRITERS = ("refinery.io", "refinery.pipeline.output")   # the only modules that write to a filesystem
# model serialization: a model writes its weights with its library's writer into the folder it is handed (a
# folder of the output object's or a checkpoint's); Chromium's scratch profile and screenshots are a temporary
# folder of the browser's, copied into a report through the output object; /proc/self/clear_refs resets the
# kernel's peak-memory counter (no file); ``check_stage`` clears and restores the scratch folders of its checks
SERIALIZERS = {("refinery.models", "save"), ("refinery.report.browser", None), ("refinery.progress", "reset_peak_rss"),
               ("refinery.testing", None)}
PUBLISHERS = {"AtomicDir", "CorpusWriter", "RunOutput", "Checkpoints", "ParquetWriter", "write_feather",
              "save_to_disk", "to_parquet", "to_csv", "save_pretrained", "makedirs", "mkdir", "rmdir", "rmtree",
              "unlink", "rename", "move", "copyfile", "copytree", "touch"}
FILESYSTEMS = {"os", "shutil", "fs"}   # their put, rm, mv, remove, replace, copy move files (str.replace does not)
WRITES_ON_FILESYSTEMS = {"put", "put_file", "rm", "mv", "remove", "replace", "copy"}


def _mode(call: ast.Call, index: int):
    given = [k.value for k in call.keywords if k.arg == "mode"] or call.args[index:index + 1]
    return given[0].value if given and isinstance(given[0], ast.Constant) else None


def _direct_writes(path: Path):
    """(line, what) of each call in ``path`` that writes, moves or removes a file or folder by itself."""
    tree = ast.parse(path.read_text(), str(path))
    scopes = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                scopes.setdefault(id(node), fn.name)
    for node, name, receiver in _calls(tree):
        scope = scopes.get(id(node))
        if name == "open" and any(c in (_mode(node, 1) or "") for c in "wax+"):
            yield node.lineno, f"{receiver + '.' if receiver else ''}open(…, {_mode(node, 1)!r})", scope
        elif name in ("write_text", "write_bytes") and len(node.args) + len(node.keywords) == 1:
            yield node.lineno, f"Path.{name}", scope   # the output object's folders take (name, data)
        elif name in PUBLISHERS or (name in WRITES_ON_FILESYSTEMS and receiver in FILESYSTEMS) \
                or (name == "write_table" and receiver in ("", "pq", "parquet")):
            yield node.lineno, f"{receiver + '.' if receiver else ''}{name}(…)", scope
        elif name == "dump" and receiver == "json":
            yield node.lineno, "json.dump(…)", scope


def test_only_the_output_object_and_io_write():
    """Issue 42: every file a stage publishes goes through ``pipeline.output.StageOutput`` and io/ (atomic,
    owned, on the output's store with its storage options); nothing else opens a path to write."""
    found = []
    for module, path in MODULES.items():
        if any(module == w or module.startswith(w + ".") for w in WRITERS):
            continue
        for line, what, scope in _direct_writes(path):
            if any(module.startswith(prefix) and (fn is None or scope == fn) for prefix, fn in SERIALIZERS):
                continue
            found.append(f"{_where(module, line)}: {what}" + (f" in {scope}()" if scope else ""))
    assert not found, ("files written outside io/ and the output object (pipeline/output.py):\n"
                       + "\n".join(found))


def test_modules_and_signatures_stay_small():
    """Issue 42: a module holds one concern (≤ 500 lines); a function takes ≤ 8 positional parameters (its
    options keyword-only)."""
    long = [f"{path.relative_to(ROOT.parent)}: {n} lines" for path in MODULES.values()
            if (n := len(path.read_text().splitlines())) > 500]
    wide = []
    for module, path in MODULES.items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                n = len(params) - (params[:1] in (["self"], ["cls"]))
                if n > 8:
                    wide.append(f"{_where(module, fn.lineno)}: {fn.name} takes {n} positional parameters")
    assert not long and not wide, "\n".join(long + wide)


def test_one_implementation_of_mode():
    """Issue 53: ``--mode`` is decided in one place (``io.modes``: its choices and ``keeps_finished``), which every
    verb, rf. call, pipeline step and corpus writer asks; no other module compares a mode with a choice or spells
    the choices out."""
    found = []
    for module, path in MODULES.items():
        if module == "refinery.io.modes":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "mode" and any(
                    isinstance(c, ast.Constant) and c.value in ("skip", "error") for c in node.comparators):
                found.append(f"{_where(module, node.lineno)}: compares mode with {node.comparators[0].value!r}")
            if isinstance(node, (ast.Tuple, ast.List)) and {"overwrite", "skip", "error"} <= {
                    e.value for e in node.elts if isinstance(e, ast.Constant)}:
                found.append(f"{_where(module, node.lineno)}: spells the modes out")
    assert not found, "\n".join(found)


def test_one_place_asks_whether_an_output_is_finished():
    """Issue 53: whether a stage's folder, a corpus or a Hugging Face folder is finished, and what its run recorded,
    is read in one place (``io.finished.finished``; ``_SUCCESS`` itself by ``ownership.run_record``, which the
    commit pointer's reader shares): no other module reads ``_SUCCESS``, looks a manifest up to ask, or defines a
    function of its own that answers it."""
    own = {"refinery.io.finished", "refinery.io.ownership", "refinery.io.modes"}
    found = []
    for module, path in MODULES.items():
        if module in own:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "finished" in node.name:
                found.append(f"{_where(module, node.lineno)}: defines {node.name}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "json_object" and \
                    any(isinstance(a, ast.Name) and a.id == "RUN_MARKER" or "RUN_MARKER" in ast.dump(a)
                        for a in node.args):
                found.append(f"{_where(module, node.lineno)}: reads _SUCCESS")
            if isinstance(node, ast.Name) and node.id == "manifest_path" and module not in (
                    "refinery.io.corpus", "refinery.io.corpus_writer"):   # opening a corpus, rewriting its own
                found.append(f"{_where(module, node.lineno)}: looks a manifest up")
    assert not found, "\n".join(found)


def _report_key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of every read of a stage's report by a string key: ``x.report["k"]``, ``x.report.get("k")``, and
    the same on a name bound to ``x.report`` or to what was loaded from a file named report.json."""
    def is_report(node, names) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "report") or \
            (isinstance(node, ast.Name) and node.id in names)

    found = set()   # nested scopes are walked again by their enclosing ones
    for scope in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]:
        names = {t.id for n in ast.walk(scope) if isinstance(n, ast.Assign)
                 and (is_report(n.value, ()) or "'report.json'" in ast.dump(n.value))
                 for t in n.targets if isinstance(t, ast.Name)}
        for node in ast.walk(scope):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_report(node.value, names) \
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                found.add((node.lineno, node.col_offset, node.slice.value))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and is_report(node.func.value, names) and node.args and isinstance(node.args[0], ast.Constant):
                found.add((node.lineno, node.col_offset, node.args[0].value))
    return [(line, key) for line, _, key in sorted(found)]


def test_no_string_key_read_of_another_modules_report():
    """Issue 53: what crosses modules of a stage's report (its verdicts, its audit's summary, a comparison, a step's
    record) is read as a typed record of ``core.records``, whose ``from_json`` is the one place its keys are
    spelled: no module reads a stage's report (``result.report``, a report.json it loaded) by a string key, and
    the pipeline's report reads each step's report.json only through ``StageReport``. The check must find the
    reads this rule forbids."""
    planted = ast.parse("def f(result):\n    r = result.report\n    return r['threshold'], result.report.get('x')\n")
    assert [key for _, key in _report_key_reads(planted)] == ["threshold", "x"]
    found = [f"{_where(module, line)}: report[{key!r}]" for module, path in MODULES.items()
             if module != "refinery.core.records" for line, key in _report_key_reads(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)
    step_audits = MODULES["refinery.pipeline.step_audits"].read_text()
    assert "StageReport.from_json(json.loads(" in step_audits and "methods" not in {
        t.split(".")[1] for m, t, _, _ in EDGES if m == "refinery.pipeline.step_audits" and t.count(".")}



# A record-like value: a dict whose keys are fields (a report, a manifest, a marker's body), not a typed mapping
# whose keys are data (``dict[str, int]``: rows per label). Unannotated: what it returns is not said, so it counts.
_UNTYPED = {"dict", "dict | None", "Mapping", "dict[str, Any]", "dict[str, object]", "Any", "tuple[dict, pa.Table]"}


def _returns() -> dict[str, str | None]:
    """{"module.function" / "module.Class.method": its return annotation} of every refinery function and method,
    and {"module.Class.attribute": its annotation} of every annotated class attribute and property."""
    found = {}
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{module}.{node.name}"] = ast.unparse(node.returns) if node.returns else None
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found[f"{module}.{node.name}.{item.name}"] = ast.unparse(item.returns) if item.returns else None
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        found[f"{module}.{node.name}.{item.target.id}"] = ast.unparse(item.annotation)
    return found


def _record_like(annotation: str | None) -> bool:
    return annotation is None or annotation in _UNTYPED or annotation.startswith("tuple[dict")


def _foreign_record_reads(tree: ast.AST, module: str, returns: dict) -> list[tuple[int, str]]:
    """(line, what) of every read by a string key (``x["k"]``, ``x.get("k")``) of a record-like dict another
    module made: the value of a call of another module's function (read at once, or through any name, tuple part
    or ``self`` attribute it was bound to), or an attribute of another module's class declared a record-like
    dict (``corpus.body["k"]``)."""
    imported = {}   # local name -> "module.name" of refinery's own functions, classes and modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("refinery") and not node.level:
            imported.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            imported.update({(a.asname or a.name): a.name for a in node.names if a.name.startswith("refinery")})
    foreign_attributes = {qualified.rsplit(".", 1)[1] for qualified, annotation in returns.items()
                          if qualified.count(".") >= 3 and annotation is not None and _record_like(annotation)
                          and not qualified.startswith(module + ".")} - {
        qualified.rsplit(".", 1)[1] for qualified, annotation in returns.items()
        if qualified.count(".") >= 3 and annotation is not None and not _record_like(annotation)}

    def made_by(call) -> str | None:
        """The other module's function (or class method) ``call`` calls, where it returns a record-like value."""
        if not isinstance(call, ast.Call):
            return None
        dotted = ast.unparse(call.func)
        head = dotted.split(".")[0]
        if head not in imported:
            return None
        qualified = imported[head] + dotted[len(head):]
        if qualified in returns and not qualified.startswith(module + "."):
            return qualified if _record_like(returns[qualified]) else None
        return None

    def part_made_by(call, index: int) -> str | None:
        """The function a tuple-returning ``call`` comes from, where its part ``index`` is record-like."""
        if not isinstance(call, ast.Call):
            return None
        dotted = ast.unparse(call.func)
        head = dotted.split(".")[0]
        qualified = imported.get(head, "") + dotted[len(head):]
        annotation = returns.get(qualified) if head in imported and not qualified.startswith(module + ".") else None
        if not annotation or not annotation.startswith("tuple["):
            return None
        parts = [ast.unparse(e) for e in ast.parse(annotation, mode="eval").body.slice.elts]
        return qualified if index < len(parts) and _record_like(parts[index]) else None

    def attribute_of(value) -> str | None:
        """What ``value`` is, where it is an attribute another module's class declares a record-like dict."""
        if isinstance(value, ast.Attribute) and value.attr in foreign_attributes \
                and ast.unparse(value.value) not in ("self", "cls"):
            return f"the attribute {value.attr}"
        return None

    def bound(scope) -> dict[str, str]:
        """{name or self.attribute: the function it was bound to the value of} within ``scope``; a loop's or a
        comprehension's name, to each of the values it runs over (``for m in (c.manifest for c in corpora)``)."""
        names = {}
        for node in ast.walk(scope):
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                over = node.iter
                elements = [over.elt] if isinstance(over, (ast.GeneratorExp, ast.ListComp, ast.SetComp)) else \
                    over.elts if isinstance(over, (ast.List, ast.Tuple)) else []
                source = next((made_by(e) or attribute_of(e) for e in elements if made_by(e) or attribute_of(e)),
                              None)
                if source is not None:
                    names[node.target.id] = source
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Tuple):
                        for i, element in enumerate(target.elts):
                            if (source := part_made_by(node.value, i)) is not None:
                                names[ast.unparse(element)] = source
                    elif (source := made_by(node.value)) is not None:
                        names[ast.unparse(target)] = source
        return names

    found = set()
    scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]
    classes = {id(method): cls for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for method in cls.body}
    for scope in scopes:
        names = bound(scope)
        if id(scope) in classes:   # a method: what other methods of its class bound to ``self``'s attributes too
            names = {**{k: v for k, v in bound(classes[id(scope)]).items() if k.startswith("self.")}, **names}
        for node in ast.walk(scope):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                value, key = node.value, node.slice.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                value, key = node.func.value, node.args[0].value
            else:
                continue
            source = names.get(ast.unparse(value)) or made_by(value) or attribute_of(value)
            if source is not None:
                found.add((node.lineno, f"{ast.unparse(value)}[{key!r}] ({source})"))
    return sorted(found)


def test_no_string_key_read_of_a_record_another_module_made():
    """Issue 63: what one module hands another is a typed record (a dataclass: ``CorpusManifest``, ``Marker``,
    ``HfStamp``, ``Converted``, ``Predictability``, ``StageResult``, …) or a typed mapping whose keys are data
    (``dict[str, int]``), never a dict read by field names elsewhere: no module reads by a string key a dict
    returned by another module's function or held in another module's class attribute declared a bare ``dict``.
    The check must find a planted read, whatever name the value is bound to."""
    returns = {"refinery.io.somewhere.made": "dict", "refinery.io.somewhere.counts": "dict[str, int]",
               "refinery.io.somewhere.both": "tuple[dict, pa.Table]", "refinery.io.somewhere.Made.body": "dict"}
    planted = ast.parse(
        "from refinery.io.somewhere import made, counts, both\nfrom refinery.io import somewhere\n"
        "def f(x):\n    whatever_name = made(x)\n    body, table = both(x)\n    per_label = counts(x)\n"
        "    return whatever_name['rows'], somewhere.made(x).get('files'), body['run'], per_label['entailment'], "
        "x.body['k'], table['label']\n"
        "class S:\n    def prepare(self):\n        self.kept = made(1)\n    def result(self):\n"
        "        return self.kept['seed']\n"
        "def g(corpora):\n    return sum(m['rows'] for m in (c.body for c in corpora))\n")
    assert sorted(what.split("[")[0] for _, what in _foreign_record_reads(planted, "refinery.cli.x", returns)) == [
        "body", "m", "self.kept", "somewhere.made(x)", "whatever_name", "x.body"]
    returns = _returns()
    found = [f"{_where(module, line)}: {what}" for module, path in MODULES.items()
             for line, what in _foreign_record_reads(ast.parse(path.read_text()), module, returns)]
    assert not found, "\n".join(found)

# ---------------------------------------------------------------- one shape for every method (issue 53)

def test_every_method_is_a_package_of_the_same_shape():
    """Issue 53: ``refinery/methods/`` holds packages only (no flat method modules), and every package whose stage
    the registry names holds it in ``stage.py``, beside its config in ``config.py``."""
    from refinery.pipeline.stage import REGISTRY

    methods = ROOT / "methods"
    flat = [p.name for p in sorted(methods.iterdir()) if p.name not in ("__init__.py", "__pycache__")
            and not (p.is_dir() and (p / "__init__.py").is_file())]
    misplaced, unshaped = [], []
    for name, entry in REGISTRY.items():
        module = entry.partition(":")[0] if isinstance(entry, str) else entry.__module__
        parts = module.split(".")
        if parts[:2] != ["refinery", "methods"]:
            continue
        if len(parts) != 4 or parts[3] != "stage":
            misplaced.append(f"{name}: {module} (not refinery.methods.PACKAGE.stage)")
        elif not (methods / parts[2] / "config.py").is_file():
            unshaped.append(f"{name}: refinery/methods/{parts[2]}/ has no config.py")
    assert not flat and not misplaced and not unshaped, "\n".join(
        [f"refinery/methods/{f}: not a package" for f in flat] + misplaced + unshaped)


# ---------------------------------------------------------------- one implementation of resuming (issue 53)

RESUME = "refinery.io.checkpoints"   # keeps finished pieces of long work, finds them again, knows their key


def _resume_mechanisms(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each way ``tree`` keeps or finds finished pieces of work by itself: a class with ``done`` and
    ``get``, ``put`` or ``write`` (a store of pieces), a function that finds a reusable, last or read-back piece, a
    piece's key file written (``key.json``, or a JSON file of a ``fingerprint``) or read back, or step folders of
    its own."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if "done" in methods and methods & {"get", "put", "write", "read_table"}:
                found.append((node.lineno, f"class {node.name} keeps pieces"))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                w in node.name for w in ("reusable", "last_checkpoint", "local_root", "read_back")):
            found.append((node.lineno, f"defines {node.name}"))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            named = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            fingerprint = any(isinstance(k, ast.Constant) and k.value == "fingerprint" for a in node.args[1:]
                              for n in ast.walk(a) if isinstance(n, ast.Dict) for k in n.keys)
            if name in ("write_text", "write_bytes", "pipe_file", "open") and named and (
                    named[0] == "key.json" or (named[0].endswith(".json") and fingerprint)):
                found.append((node.lineno, f"{name}({named[0]!r}): a piece's key of its own"))
            if name in ("step_folders", "StepFolders", "read_back"):
                found.append((node.lineno, f"{name}(…): finds pieces of its own"))
    return found


def test_one_implementation_of_resume():
    """Issue 53: a finished piece of long work (a fold, a shard, an iteration, an epoch, a round, an IBADR iteration's
    folder with its models, a comparison's run) is kept, found again on a rerun and known to come from the same work
    (its task's key, or a key of its own) in one place, ``io.checkpoints.Checkpoints``, which the output object hands
    out: no other module defines a store of pieces, writes or reads a piece's key file, or keeps step folders of
    its own. The check must find the mechanisms this rule forbids."""
    planted = ast.parse("class Steps:\n    def done(self): ...\n    def put(self, n, t): ...\n"
                        "def _reusable_run(out, part):\n    return out.read_back(part, 'run.json')\n"
                        "def keep(d, key):\n    d.write_text('run.json', json.dumps({'fingerprint': key}))\n"
                        "    d.write_text('key.json', '{}')\n    d.write_text('run.json', json.dumps({'rows': 1}))\n")
    assert sorted(what.split(":")[0] for _, what in _resume_mechanisms(planted)) == [
        "class Steps keeps pieces", "defines _reusable_run", "read_back(…)", "write_text('key.json')",
        "write_text('run.json')"]
    found = [f"{_where(module, line)}: {what}" for module, path in MODULES.items() if module != RESUME
             for line, what in _resume_mechanisms(ast.parse(path.read_text()))]
    assert not found, "\n".join(found)
    assert "Checkpoints" in PUBLISHERS and not (ROOT / "io" / "step_folders.py").exists()


# Options of other programs a message may name (``ray start --head``, ``pip install --no-deps``), and the string
# the option machinery builds a flag's off-name from.
_OTHER_PROGRAMS_OPTIONS = {("refinery.pipeline.cluster_address", "--head"), ("refinery.pipeline.cluster_address", "--address"),
                           ("refinery.models.registry", "--no-deps"), ("refinery.pipeline.fields", "--no-")}
_OPTION_SPELLED = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _options_spelled(tree) -> list[tuple[int, str]]:
    """(line, option) of each CLI option spelled in a string of ``tree`` that is not a docstring or an option's
    own declaration (a config field's ``option=``)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.keyword) and node.arg == "option":
            skipped.update(id(n) for n in ast.walk(node.value))
    return [(node.lineno, option) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
            for option in _OPTION_SPELLED.findall(node.value)]


def test_no_option_spelled_below_the_front_doors():
    """Issue 63: a message names a setting as a record (``refinery.messages.Setting``), which each front door words
    in its own terms (``--max-copies 2``, ``max_copies=2``, ``max_copies: 2``); no module under the front doors
    spells a CLI option in a string (its help, an error, a report's remedy). The check must find a planted one."""
    planted = ast.parse('def f(cap):\n    """Uses --docs."""\n    x = setting(1, option="--k")\n'
                        '    raise ValueError(f"lower --max-copies (now {cap})")\n')
    assert _options_spelled(planted) == [(4, "--max-copies")]
    below = [m for m in MODULES if _layer(m) < LAYERS.index("refinery.api")
             and m not in ("refinery.messages", "refinery.report.browser")]   # the terms; Chromium's options
    found = [f"{_where(module, line)}: {option}" for module in below
             for line, option in _options_spelled(ast.parse(MODULES[module].read_text()))
             if (module, option) not in _OTHER_PROGRAMS_OPTIONS]
    assert not found, f"{len(found)} options spelled:\n" + "\n".join(found)


def _uncoded_user_errors(tree) -> list[tuple[int, str]]:
    """(line, what) of each ``raise ValueError(…)`` / ``raise KeyError(…)`` (a user's error without a code) and each
    plain ``Refusal(…)`` that gives no ``code=``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and isinstance(node.exc.func, ast.Name) \
                and node.exc.func.id in ("ValueError", "KeyError"):
            found.append((node.lineno, f"raise {node.exc.func.id}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Refusal" \
                and not any(k.arg == "code" for k in node.keywords):
            found.append((node.lineno, "Refusal without code="))
    return found


def test_every_refusal_names_its_code():
    """Issue 63: what a user can fix is a ``Refusal`` with a code (``refinery.messages.CODES``: what a program
    matches, the command line prints as ``[missing-columns]`` and docs/errors.md explains), never a bare
    ``ValueError``; refinery's own faults raise ``RuntimeError`` or ``TypeError``. The check must find planted ones."""
    planted = ast.parse('def f(x):\n    if x:\n        raise ValueError("no")\n    raise Refusal("give ", x)\n'
                        'def g():\n    raise Refusal("give", code="missing-setting")\n')
    assert _uncoded_user_errors(planted) == [(3, "raise ValueError"), (4, "Refusal without code=")]
    found = [f"{_where(module, line)}: {what}" for module in MODULES if module != "refinery.messages"
             for line, what in _uncoded_user_errors(ast.parse(MODULES[module].read_text()))]
    assert not found, f"{len(found)} user errors without a code:\n" + "\n".join(found)


def test_every_refusal_code_is_explained():
    """docs/errors.md explains each code of ``refinery.messages.CODES``, under a heading of its own, and no other."""
    from refinery.messages import CODES

    page = (ROOT.parent / "docs" / "errors.md").read_text()
    assert re.findall(r"^### `([a-z-]+)`$", page, re.M) == list(CODES)


def test_every_stage_declares_its_reports_record():
    """Issue 63: each stage's report is a typed record (``Stage.report_type``, a frozen dataclass derived from
    ``ReportRecord``) that ``StageResult`` carries and report.json is the JSON of; no stage reports a dict."""
    import dataclasses

    from refinery.core.report_record import ReportRecord
    from refinery.pipeline.stage import StageResult, stage_class, stage_names

    undeclared = [name for name in stage_names() if not (issubclass(stage_class(name).report_type, ReportRecord)
                                                         and stage_class(name).report_type is not ReportRecord)]
    assert not undeclared, f"stages reporting no record of their own: {undeclared}"
    assert all(stage_class(name).report_type.__dataclass_params__.frozen for name in stage_names())
    with pytest.raises(TypeError, match="ReportRecord"):
        StageResult(1, {"kept": 1}, {"kept": 1})
    assert dataclasses.is_dataclass(ReportRecord) and ReportRecord().to_json() == {}
