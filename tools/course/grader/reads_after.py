"""Find hidden tests that compare a learner's result with a value read from its arguments after the call.

A test that computes its expected value from an object it has handed to the learner's function reads
whatever the learner's code left there: while the grading boundary mirrored every in-place effect, a
wrong answer that also overwrote its input (`logits.zero_()`) made such a test agree with it (17:
25 -> 26 of 34 points). The boundary now brings back only the changes a contract declares, and
`grading build` refuses these tests as well (`reads_after_call`): compute the expected value before the
call, or from a copy (`x.clone()`, `copy.deepcopy(batch)`).

Static and deliberately simple, within one test cell in text order:

* an argument is a set of access paths (`batch`, `batch["ids"]`, `model.weight`; `x[i]` stands for any
  item of `x`), through subscripts, attributes, starred and literal containers, shallow copies
  (`list(x)`, `dict(x)`, `copy.copy(x)`) and tensor methods that may return the same storage (`view`,
  `reshape`, `detach`, `to`, ...); any other call makes a new object. A read overlaps an argument when
  one path extends the other (`batch` and `batch["ids"]` do, `names[2]` and `names[3]` do not);
* after the call, a statement that reads an argument taints the names it binds, one that reads the
  call's result (the names its statement binds) taints those, and a statement that reads both, or reads
  an argument in the very statement that makes the call (`assert f(x) == g(x)`), is a finding. Binding
  a name anew from nothing tainted ends its taint.

Never findings: arguments the contract lets the function change (the test reads their effects on
purpose); names the cell binds only to immutable values (numbers, strings, what `str()`, `len()` or
`.hexdigest()` return, tuples of them, loop targets over literal tuples of them or over a `range`) and the
items of a list of them; setup objects (names the cell never binds: they go by name, the learner's
function gets its own process's copy, and the learner's side reports a change); passing an argument to a
learner's function again; `.grad` of an argument after `backward_through` (gradients come back by design);
an `is` / `is not` operand and an assertion's message. Reusing a valid input to build the next case
(`bad = dict(good, ...)`) is no finding either: nothing of it is compared with a result.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

ALIASING_CALLS = {"list", "tuple", "dict", "set", "sorted", "reversed", "iter", "zip", "enumerate"}
"""Builtins whose result holds the same items (a shallow copy or a view of them)."""
ALIASING_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "t", "transpose", "permute", "squeeze", "unsqueeze", "expand",
    "expand_as", "narrow", "select", "unfold", "detach", "detach_", "flatten", "unflatten", "movedim", "moveaxis",
    "swapaxes", "swapdims", "as_strided", "diagonal", "split", "chunk", "unbind", "tensor_split", "to", "float",
    "double", "half", "bfloat16", "long", "int", "short", "bool", "cpu", "cuda", "contiguous", "type", "type_as",
    "requires_grad_", "values", "items", "keys", "get", "copy", "parameters", "named_parameters", "modules",
    "children", "state_dict",
}
"""Methods whose result may share the receiver's storage or items."""
GRADIENT_HELPER = "backward_through"
GRADIENT_KEYWORDS = {"select", "reduce", "weights"}
ANY = "*"

Path = tuple


@dataclass(frozen=True)
class Finding:
    """One comparison of a learner's result with an argument read after the call."""

    function: str
    argument: str
    name: str
    call_line: int
    read_line: int

    def describe(self) -> str:
        via = "" if self.name == self.argument else f" (as {self.argument!r})"
        return (f"line {self.read_line} compares a result of {self.function} with {self.name!r}, read after "
                f"line {self.call_line} passed it to {self.function}{via}")


# ---------------------------------------------------------------------------
# Access paths
# ---------------------------------------------------------------------------

def _key(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) else ANY


def _paths(node: ast.AST) -> set[Path]:
    """The access paths an argument expression may share objects with."""
    if isinstance(node, ast.Name):
        return {(node.id,)}
    if isinstance(node, ast.Subscript):
        return {path + (_key(node.slice),) for path in _paths(node.value)}
    if isinstance(node, ast.Attribute):
        return {path + ("." + node.attr,) for path in _paths(node.value)}
    if isinstance(node, ast.Starred):
        return _paths(node.value)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*(_paths(item) for item in node.elts)) if node.elts else set()
    if isinstance(node, ast.Dict):
        return set().union(*(_paths(item) for item in node.values if item is not None)) if node.values else set()
    if isinstance(node, ast.IfExp):
        return _paths(node.body) | _paths(node.orelse)
    if isinstance(node, ast.Call):
        function = node.func
        if isinstance(function, ast.Name) and function.id in ALIASING_CALLS:
            return set().union(*(_paths(item) for item in node.args)) if node.args else set()
        if isinstance(function, ast.Attribute) and function.attr in ALIASING_METHODS:
            return _paths(function.value)
        if isinstance(function, ast.Attribute) and function.attr == "copy" and isinstance(function.value, ast.Name) \
                and function.value.id == "copy":  # copy.copy(x): shallow
            return set().union(*(_paths(item) for item in node.args)) if node.args else set()
    return set()


def _overlap(left: Path, right: Path) -> bool:
    return all(a == b or ANY in (a, b) for a, b in zip(left, right))


def _read_path(node: ast.Name, parents: dict) -> Path:
    """The longest access path a load stands at the root of (`names[3]` for the `names` of `names[3]`)."""
    path, current = (node.id,), node
    while current in parents:
        parent = parents[current]
        if isinstance(parent, ast.Subscript) and parent.value is current:
            path += (_key(parent.slice),)
        elif isinstance(parent, ast.Attribute) and parent.value is current:
            path += ("." + parent.attr,)
        else:
            break
        current = parent
    return path


# ---------------------------------------------------------------------------
# The cell's structure
# ---------------------------------------------------------------------------

def _position(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _end(node: ast.AST) -> tuple[int, int]:
    return node.end_lineno, node.end_col_offset


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


IMMUTABLE_CALLS = {"str", "int", "float", "bool", "len", "repr", "round", "abs", "hex", "oct", "bin", "ord", "chr",
                   "format"}
IMMUTABLE_METHODS = {"hexdigest", "lower", "upper", "strip", "lstrip", "rstrip", "replace", "join", "format", "encode",
                     "decode", "title", "casefold", "zfill", "removeprefix", "removesuffix", "item"}
"""Calls whose result is a number, a string or bytes."""


def _immutable(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        function = node.func
        return (isinstance(function, ast.Name) and function.id in IMMUTABLE_CALLS) or (
            isinstance(function, ast.Attribute) and function.attr in IMMUTABLE_METHODS)
    if isinstance(node, ast.JoinedStr):
        return all(_immutable(part.value) if isinstance(part, ast.FormattedValue) else True for part in node.values)
    if isinstance(node, ast.Tuple):
        return all(_immutable(item) for item in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _immutable(node.operand)
    if isinstance(node, ast.BinOp):
        return _immutable(node.left) and _immutable(node.right)
    return False


def _immutable_items(tree: ast.AST) -> set[str]:
    """Names bound (each time) to a list, tuple or comprehension of immutable values: their items cannot change."""
    verdict: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            fine = (isinstance(value, (ast.List, ast.Tuple)) and all(_immutable(item) for item in value.elts)) or (
                isinstance(value, ast.ListComp) and _immutable(value.elt))
            verdict[node.targets[0].id] = verdict.get(node.targets[0].id, True) and fine
    return {name for name, fine in verdict.items() if fine}


def _immutable_names(tree: ast.AST, parents: dict) -> set[str]:
    """Names every binding of which, in the cell, is an immutable literal (or a loop target over a literal
    sequence of them)."""
    verdict: dict[str, bool] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)):
            continue
        owner, current = None, node
        while current in parents:
            current = parents[current]
            if isinstance(current, (ast.Assign, ast.For, ast.AsyncFor, ast.comprehension)) or isinstance(current, ast.stmt):
                owner = current
                break
        if isinstance(owner, ast.Assign) and len(owner.targets) == 1 and owner.targets[0] is node:
            fine = _immutable(owner.value)
        elif isinstance(owner, ast.Assign) and len(owner.targets) == 1 and isinstance(owner.targets[0], ast.Tuple) \
                and isinstance(owner.value, ast.Tuple) and len(owner.value.elts) == len(owner.targets[0].elts) \
                and node in owner.targets[0].elts:  # a, b = x, y
            fine = _immutable(owner.value.elts[owner.targets[0].elts.index(node)])
        elif isinstance(owner, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(owner.iter, (ast.Tuple, ast.List)):
            fine = all(_immutable(item) for item in owner.iter.elts)
        elif isinstance(owner, (ast.For, ast.AsyncFor, ast.comprehension)) and isinstance(owner.iter, ast.Call) \
                and isinstance(owner.iter.func, ast.Name) and owner.iter.func.id == "range" and owner.target is node:
            fine = True  # integers
        else:
            fine = False
        verdict[node.id] = verdict.get(node.id, True) and fine
    return {name for name, fine in verdict.items() if fine}


def _learner_calls(tree: ast.AST, learner: dict) -> list[tuple[ast.Call, str, list[tuple[str, ast.AST]], bool]]:
    """`(call, function, [(parameter name, argument expression)], through backward_through)` of every call
    of a learner's function (`learner`: name -> positional parameter names)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        name, args, gradient = node.func.id, list(node.args), False
        if name == GRADIENT_HELPER and args and isinstance(args[0], ast.Name) and args[0].id in learner:
            name, args, gradient = args[0].id, args[1:], True
        if name not in learner:
            continue
        parameters = learner[name]
        named = [(parameters[index] if index < len(parameters) and not isinstance(arg, ast.Starred)
                  else f"argument {index + 1}", arg) for index, arg in enumerate(args)]
        named += [(keyword.arg or "**", keyword.value) for keyword in node.keywords
                  if not (gradient and keyword.arg in GRADIENT_KEYWORDS)]
        found.append((node, name, named, gradient))
    return found


def _not_a_value_read(node: ast.Name, parents: dict, learner: dict, gradient: bool) -> bool:
    """A load that reads nothing of the argument's value: passed to a learner's function again, an `is`
    operand, part of an assertion's message, or (after `backward_through`) its `.grad`."""
    parent = parents.get(node)
    if gradient and isinstance(parent, ast.Attribute) and parent.attr == "grad":
        return True
    top = node
    while isinstance(parents.get(top), (ast.Subscript, ast.Attribute)) and parents[top].value is top:
        top = parents[top]
    if isinstance(parents.get(top), ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot))
                                                          for op in parents[top].ops):
        return True
    current = node
    while current in parents:
        parent = parents[current]
        if isinstance(parent, ast.Assert) and current is parent.msg:
            return True
        if isinstance(parent, ast.Call) and current is not parent.func and isinstance(parent.func, ast.Name) and (
                parent.func.id in learner or parent.func.id == GRADIENT_HELPER):
            return True
        if isinstance(parent, ast.stmt):
            return False
        current = parent
    return False


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.FunctionDef,
             ast.AsyncFunctionDef, ast.ClassDef)


def _header(statement: ast.stmt) -> list[ast.AST]:
    """What a compound statement itself evaluates (not its body)."""
    if isinstance(statement, (ast.If, ast.While)):
        return [statement.test]
    if isinstance(statement, (ast.For, ast.AsyncFor)):
        return [statement.iter, statement.target]
    if isinstance(statement, (ast.With, ast.AsyncWith)):
        return [part for item in statement.items for part in (item.context_expr, item.optional_vars) if part]
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [*statement.args.defaults, *statement.decorator_list]
    return []


@dataclass
class _Unit:
    """One simple statement (or a compound statement's header): the names it reads and binds."""

    position: tuple
    parts: list
    reads: list  # ast.Name loads
    binds: set


def _units(tree: ast.AST) -> list[_Unit]:
    units = []
    for statement in ast.walk(tree):
        if not isinstance(statement, ast.stmt):
            continue
        parts = _header(statement) if isinstance(statement, _COMPOUND) or _is_other_compound(statement) \
            else [statement]
        names = [node for part in parts for node in ast.walk(part) if isinstance(node, ast.Name)]
        units.append(_Unit(_position(statement), parts, [node for node in names if isinstance(node.ctx, ast.Load)],
                           {node.id for node in names if not isinstance(node.ctx, ast.Load)}))
    return sorted(units, key=lambda unit: unit.position)


def _is_other_compound(statement: ast.stmt) -> bool:
    """`try ... except*` and `match` hold statements too."""
    return type(statement).__name__ in ("TryStar", "Match")


def _contains(unit: _Unit, node: ast.AST) -> bool:
    return any(node is inner for part in unit.parts for inner in ast.walk(part))


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------

def _argument_reads(unit: _Unit, origin: dict, parents: dict, learner: dict, gradient: bool,
                    after: tuple | None = None) -> list[tuple[ast.Name, str]]:
    """`(load, parameter)` of every value read of an argument in `unit` (at or after `after`)."""
    found = []
    for read in unit.reads:
        if after is not None and _position(read) < after:
            continue
        path = _read_path(read, parents)
        parameter = next((parameter for arg, parameter in origin.items() if _overlap(arg, path)), None)
        if parameter is not None and not _not_a_value_read(read, parents, learner, gradient):
            found.append((read, parameter))
    return found


def reads_after_call(code: str, learner: dict[str, tuple[str, ...]],
                     changes: dict[str, frozenset[str]] | None = None) -> list[Finding]:
    """Every place a test compares a learner's result with what it read from the call's arguments after the
    call (see the module docstring). `learner`: exercise name -> its positional parameter names; `changes`:
    exercise name -> the parameters its contract lets it change."""
    tree = ast.parse(code)
    parents = _parents(tree)
    changes = changes or {}
    units = _units(tree)
    bound = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)}
    immutable = _immutable_names(tree, parents)
    items = _immutable_items(tree)
    findings = []
    for call, function, arguments, gradient in _learner_calls(tree, learner):
        home = next(unit for unit in units if _contains(unit, call))
        origin: dict[Path, str] = {}  # argument path -> the parameter it went to
        for parameter, expression in arguments:
            if parameter in changes.get(function, frozenset()):
                continue
            origin.update({path: parameter for path in _paths(expression) if path[0] in bound
                           and path[0] not in immutable and not (path[0] in items and len(path) > 1)})
        if not origin:
            continue
        findings += [Finding(function, parameter, read.id, call.lineno, read.lineno)
                     for read, parameter in _argument_reads(home, origin, parents, learner, gradient, _end(call))]
        origin = {path: parameter for path, parameter in origin.items() if path[0] not in home.binds}
        from_result = set(home.binds)
        for unit in units:
            if unit.position <= home.position or _contains(unit, call):
                continue
            reads = _argument_reads(unit, origin, parents, learner, gradient)
            result_reads = [read for read in unit.reads if read.id in from_result]
            if reads and result_reads:
                findings.append(Finding(function, reads[0][1], reads[0][0].id, call.lineno, reads[0][0].lineno))
            if reads:
                origin.update({(name,): reads[0][1] for name in unit.binds})
            else:
                origin = {path: parameter for path, parameter in origin.items() if path[0] not in unit.binds}
            if result_reads:
                from_result |= unit.binds
            else:
                from_result -= unit.binds
            if not origin:
                break
    unique = {(f.function, f.argument, f.name, f.call_line, f.read_line): f for f in findings}
    return sorted(unique.values(), key=lambda f: (f.read_line, f.call_line, f.name))
