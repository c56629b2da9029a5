# The firmware's layout rules (docs/engine.md, Layout), read off the source:
# imports point one way (no circle, counting the imports inside functions and
# the names a package's face loads), and no module writes another object's
# private attributes (state is declared, and changed, where it lives).
import ast
import re
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "firmware", "holdfast")


def modules(root=ROOT):
    """{dotted name below holdfast ("" for the package): (path, is a package)}."""
    out = {}
    for dp, _, fns in os.walk(root):
        for fn in fns:
            if fn.endswith(".py"):
                rel = os.path.relpath(os.path.join(dp, fn), root)[:-3].replace(os.sep, ".")
                pkg = rel == "__init__" or rel.endswith(".__init__")
                out[rel[:-len("__init__")].rstrip(".") if pkg else rel] = (os.path.join(dp, fn), pkg)
    return out


def face(tree):
    """The modules a face loads: the values of its table (_WHERE in the
    package's __init__.py, or WHERE in a module of the package)."""
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") in ("_WHERE", "WHERE") for t in n.targets):
            return {v.value for v in n.value.values if isinstance(v, ast.Constant)}
    return set()


def graph(root=ROOT):
    mods = modules(root)
    edges = {}
    for name, (path, pkg) in mods.items():
        here = name if pkg else name.rpartition(".")[0]
        tree = ast.parse(open(path).read(), path)
        out = set()

        def add(target):
            target = target.strip(".")
            while target and target not in mods:  # from .x import Name: the module x
                target = target.rpartition(".")[0]
            if target != name and (target or target in mods):
                out.add(target)

        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".") if here else []
                    base = base[:len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").startswith("holdfast"):
                    mod = node.module[len("holdfast."):] if node.module != "holdfast" else ""
                else:
                    continue
                if node.module:
                    add(mod)
                for a in node.names:
                    sub = (mod + "." if mod else "") + a.name
                    if sub in mods:
                        add(sub)
                    elif not node.module:
                        add(mod)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("holdfast."):
                        add(a.name[len("holdfast."):])
        for sub in face(tree):
            add((here + "." if here else "") + sub)
        edges[name] = out
    return edges


def circles(edges):
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def private_writes(root=ROOT):
    """Where a module assigns to x._name (or x._name[i]) with x not self/cls."""
    bad = []
    for name, (path, _) in sorted(modules(root).items()):
        for node in ast.walk(ast.parse(open(path).read(), path)):
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            while targets:
                t = targets.pop()
                if isinstance(t, (ast.Tuple, ast.List)):
                    targets.extend(t.elts)
                    continue
                e = t
                while isinstance(e, ast.Subscript):
                    e = e.value
                if (isinstance(e, ast.Attribute) and e.attr.startswith("_") and not e.attr.startswith("__")
                            and not (isinstance(e.value, ast.Name) and e.value.id in ("self", "cls"))):
                    bad.append("%s:%d %s" % (name or "__init__", node.lineno, ast.unparse(t)))
    return bad


def test_the_firmware_has_no_import_circle():
    edges = graph()
    assert "session" in edges and "codec" in edges["session"], edges.get("session")  # the reader works
    assert circles(edges) == []


def test_a_circle_is_found(tmp_path):
    # The checker itself: a lazy import back, and a face's table, each close one.
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    import holdfast.a as m\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text('_WHERE = {"X": "x"}\n')
    (tmp_path / "p" / "x.py").write_text("from . import X\n")
    assert circles(graph(str(tmp_path))) == [["a", "b"], ["p", "p.x"]]


def test_the_engine_imports_no_feature():
    # The sans-I/O engine and the codec never load a feature: MQTT 5, the
    # durable outboxes, TLS, WebSockets, the shells (features register with
    # the engine, or the shells hand them in). subscriptions.py is left out:
    # at level 5 it writes its packets with MQTT 5's encoders.
    edges = graph()
    features = ("mqtt5", "durable", "tls", "tlssetup", "ws", "wsopen", "url", "shell", "client", "aclient")
    for m in ("codec", "session", "inbound", "memstore", "policies", "held", "topics"):
        assert not {e for e in edges[m] if e.split(".")[0] in features}, (m, edges[m])


def test_no_module_writes_another_objects_private_attributes(tmp_path):
    (tmp_path / "m.py").write_text("def f(s):\n    s._x = 1\n    s._y[0] = 2\n    self_ok = s.x = 3\n")
    assert private_writes(str(tmp_path)) == ["m:2 s._x", "m:3 s._y[0]"]
    assert private_writes() == []


CONST = re.compile(r"^(_[A-Z0-9_]+) = const\(([^)]*)\)", re.M)
# The numbers each module keeps as its own private const() copy (a name
# imported from another module would cost a board heap, and is no const),
# and the module whose value is the definition.
SHARED = {"codec": ("_CONNECT", "_CONNACK", "_PUBLISH", "_PUBACK", "_PUBREC", "_PUBREL", "_PUBCOMP",
                    "_SUBSCRIBE", "_SUBACK", "_UNSUBSCRIBE", "_UNSUBACK", "_PINGREQ", "_PINGRESP",
                    "_DISCONNECT"),
          "session": ("_ACK_ROOM", "_OFFLINE", "_CONNECTING", "_CONNECTED", "_MESSAGE", "_DELIVERED",
                      "_REJECTED", "_SKIPPED", "_UNDECODED")}


def test_every_copy_of_a_shared_number_has_its_definitions_value():
    mods = modules()
    found = {name: CONST.findall(open(path).read()) for name, (path, _) in mods.items()}
    checked = 0
    for home, names in SHARED.items():
        want = {n: eval(v) for n, v in found[home] if n in names}
        assert sorted(want) == sorted(names), (home, sorted(want))
        for name, consts in found.items():
            for n, v in consts:
                if n in want and name != home:
                    assert eval(v) == want[n], (name, n, v, home, want[n])
                    checked += 1
    assert checked >= 30, checked  # the copies are still found
