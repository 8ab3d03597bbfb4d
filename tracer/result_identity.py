"""Results are the arrays NumPy returns: distinct where NumPy's are, views where NumPy's are.

``return x * 2, x * 2`` gives two arrays (a write into one leaves the other), ``return y,
y[1:]`` a view of the first, ``return x, x[...]`` a new view of the argument, ``return
v, v`` one object twice. The IR records values, not objects, so two things keep the
objects apart on their way to compiled code:

* ``eliminate_common_subexpressions`` never merges one result's array into another's
  (``result_arrays``: the values results are or view);
* the trace gives a result that is another object than an earlier result or an argument,
  but the same IR value (``x[...]``, ``np.asarray(x).reshape(x.shape)``: no equation
  recorded), an equation of its own, a reshape to its own shape (``distinct_objects``),
  which compiled code makes as a new NumPy view.

From there, one IR value is one object: the program's wrapper makes each result that
views another's array from that array (``codegen.schedule.result_views``), once per value.

    >>> import numpy as np, tracejit as tj
    >>> f = tj.jit(lambda x: (x * 2.0, x * 2.0, (y := x + 1.0), y[1:]), cache="memory")
    >>> for _ in range(2):
    ...     a, b, y, tail = f(np.ones(3))
    >>> np.shares_memory(a, b), np.shares_memory(y, tail)
    (False, True)
"""

from __future__ import annotations

import itertools

import numpy as np

from .ir import Eqn, Var
from .ops import cast_p, reshape_p
from .pending import known_kind
from .view_writes import _address, index_in, numpy_root, read_again

# The primitives whose NumPy result views their operand (codegen.view_lowering.NUMPY_VIEWS)
VIEWS = frozenset({"slice", "transpose", "reshape", "flip", "broadcast_to"})


def viewed_value(var, producers):
    """The value ``var`` is a chain of views of (itself when it is no view)."""
    while isinstance(var, Var):
        eqn = producers.get(var.name)
        if eqn is None or eqn.prim.name not in VIEWS or not isinstance(eqn.inputs[0], Var):
            return var
        var = eqn.inputs[0]
    return var


def result_arrays(graph):
    """Names of the graph's outputs and of the values they view: each is an array a
    caller may hold, whose memory no other one may share unless NumPy's does."""
    producers = {item.out.name: item for item in graph.body if isinstance(item, Eqn)}
    names = set()
    for atom in graph.outputs:
        if isinstance(atom, Var):
            names.add(atom.name)
            names.add(viewed_value(atom, producers).name)
    return names


def distinct_objects(context, out_leaves, output_atoms, atom_positions, arguments):
    """Give each result leaf that is a new object but an earlier result's or an argument's
    IR value a new view of that value (``reshape`` to its own shape), in ``output_atoms``;
    a leaf that is an earlier leaf itself gets that leaf's atom.

    ``atom_positions``: result leaf index -> index in ``output_atoms``; ``arguments``: the
    traced argument leaves."""
    owners = {leaf.ir_var.name: leaf for leaf in arguments
              if isinstance(getattr(leaf, "ir_var", None), Var)}
    finals = {}  # id(result leaf) -> its atom
    for index, position in sorted(atom_positions.items()):
        leaf, atom = out_leaves[index], output_atoms[position]
        if id(leaf) in finals:
            output_atoms[position] = finals[id(leaf)]
            continue
        if isinstance(atom, Var) and _an_array(leaf) and owners.setdefault(
                atom.name, leaf) is not leaf:
            view = context.new_var(atom.aval)
            context.body.append(Eqn(reshape_p, (atom,), (("shape", tuple(atom.aval.shape)),),
                                    view))
            output_atoms[position] = atom = view
        finals[id(leaf)] = atom


def refreshed_views(context, out_leaves, arguments=()):
    """``{result leaf index: traced view}`` for a result that views another result and was
    made before a write into it that left the view's region alone (``t4 = t3[:-1]``, then
    ``t3[4] = ...``, the last trip of a loop over ``t3``'s rows). Its value is right, but
    its IR value views the older value of ``t3`` (a view apart from a write is not read
    again: ``traced_array._update``), so the results came back unrelated where NumPy's
    ``t4`` views ``t3``. Read again from the root's final value, it is a view of that.
    A view of an argument (one of the traced ``arguments``) is left to
    ``argument_views``: the caller's array, not the program's final value, is its base."""
    results = {id(leaf) for leaf in out_leaves if hasattr(leaf, "ir_var")}
    passed = {id(leaf) for leaf in arguments}
    results -= passed
    producers = {item.out.name: item for item in context.body if isinstance(item, Eqn)}
    found, made = {}, {}  # (a leaf returned twice is one object: read again once)
    # Views of one root that is no result, viewing different values of it (b = a[:2];
    # c = b[1:]; a[-1] = 0: c read again after the write, b not): read again together,
    # or the program's c and b share no memory where NumPy's do
    by_root = {}
    for leaf in out_leaves:
        root = _view_root(leaf)
        if root is not None and id(root) not in results and id(root) not in passed:
            by_root.setdefault(id(root), {})[id(leaf)] = viewed_value(leaf.ir_var, producers)
    apart = {root for root, viewed in by_root.items()
             if len({value.name for value in viewed.values()}) > 1}
    for index, leaf in enumerate(out_leaves):
        if id(leaf) in made:
            found[index] = made[id(leaf)]
            continue
        root = _view_root(leaf)
        if root is None:
            continue
        if id(root) in results:
            stale = viewed_value(leaf.ir_var, producers).name != root.ir_var.name
        else:
            stale = id(root) in apart
        if stale:
            found[index] = made[id(leaf)] = read_again(root, leaf)
    return found


def _view_root(leaf):
    """The traced array ``leaf`` is a view of (by known steps), or None."""
    if getattr(leaf, "steps", None) is None or not hasattr(leaf, "base_or_none"):
        return None
    root = leaf.base_or_none()
    if root is None or root is leaf or not isinstance(leaf.ir_var, Var) or not isinstance(
            getattr(root, "ir_var", None), Var):
        return None
    return root


def constant_views(context, out_leaves):
    """``{result leaf index: traced view}`` for results that are NumPy arrays made in the
    call (constants of the trace) sharing memory with another such result: ``t =
    np.zeros(3); return t, t[1:]``. Each is a constant of its own otherwise (its frozen
    copy), and the results came back unrelated where NumPy's share memory; as views of one
    constant (its root, ``view_writes.index_in``) the program's wrapper makes them views of
    one array again (``codegen.schedule.result_views``)."""
    def made_here(array):
        return type(array) is np.ndarray and not any(
            id(array) in table for table in (context.replaced, context.implicit_candidates,
                                             context.implicit_used))

    groups = {}
    for index, leaf in enumerate(out_leaves):
        if made_here(leaf) and not context.tensor_arguments:
            root = numpy_root(leaf)
            root = leaf if root is None else root
            if made_here(root):
                groups.setdefault(id(root), (root, []))[1].append((index, leaf))
    found = {}
    for root, members in groups.values():
        diagonals = {index: where for index, leaf in members
                     if (where := _diagonal_of(leaf, root, members)) is not None}
        if len(members) < 2 and not diagonals:  # (alone, a diagonal is read-only still)
            continue
        # (a copy: a value computed here, which the program writes into an array per call)
        base = context.tracer_for(context.atom(root)[0]).copy()
        for index, leaf in members:
            located = None if leaf is root or index in diagonals else index_in(leaf, root)
            if leaf is root:
                found[index] = base
            elif index in diagonals:  # t.diagonal(): NumPy's read-only view, made at the
                # call from the program's t (numpy_results); its array, for now (a
                # diagonal may be a slice of the root too: t.diagonal(1) is t.ravel()[1::4])
                shape, params = diagonals[index]
                found[index] = source = base if shape == root.shape else base.reshape(shape)
                context.__dict__.setdefault("numpy_results", {})[id(leaf)] = (
                    leaf, source, "diagonal", params)
            elif located is not None:
                found[index] = base[located[0]].reshape(located[1])
            elif (block := _permuted_run(leaf, root)) is not None:  # t.ravel(), t.T
                run, shape, axes = block
                found[index] = base.reshape(-1)[run].reshape(shape).transpose(axes)
            elif (block := _permuted_index(leaf, root)) is not None:  # t[:, ::-1].T
                where, shape, axes = block
                found[index] = base[where].reshape(shape).transpose(axes)
    return found


def _diagonal_of(view, root, members):
    """``(shape, (offset, axis1, axis2))`` with ``view`` the very array
    ``np.diagonal(root.reshape(shape), offset, axis1, axis2)`` is: NumPy's read-only view
    of ``root``, or of another result that is all of it (``t = np.arange(9.0).reshape(3,
    3); return t, t.diagonal()``); else None."""
    if not root.flags.c_contiguous:
        return None
    for parent in (root, *(leaf for _, leaf in members)):
        if parent.flags.c_contiguous and parent.size == root.size and (
                _address(parent) == _address(root)) and (
                params := _diagonal_params(view, parent)) is not None:
            return parent.shape, params
    return None


def _diagonal_params(view, root):
    """``(offset, axis1, axis2)`` with ``view`` the very array ``np.diagonal(root, offset,
    axis1, axis2)`` is (NumPy's read-only view); else None."""
    if view.flags.writeable or view.dtype != root.dtype or root.ndim < 2 or not view.size:
        return None
    shift = _address(view) - _address(root)
    for axis1, axis2 in itertools.permutations(range(root.ndim), 2):
        strides = root.strides[axis1], root.strides[axis2]
        for offset in {0, *(sign * shift // stride for sign, stride in zip((-1, 1), strides)
                            if stride)}:
            candidate = np.diagonal(root, offset, axis1, axis2)
            if _address(candidate) == _address(view) and candidate.shape == view.shape and (
                    candidate.strides == view.strides):
                return offset, axis1, axis2
    return None


def _permuted_run(view, root):
    """``(run, shape, axes)`` with ``view`` the very array ``root.reshape(-1)[run]
    .reshape(shape).transpose(axes)`` is (a reshape merging axes, ``t.ravel()``, or a
    transpose, ``t.T``, which ``index_in``'s basic indexing does not reach), for a
    C-contiguous ``root``; else None."""
    if not root.flags.c_contiguous or view.dtype != root.dtype or not view.size:
        return None
    order = sorted(range(view.ndim), key=lambda axis: -view.strides[axis])
    ordered = view.transpose(order)  # C-contiguous when the view is a permuted block
    if not ordered.flags.c_contiguous:
        return None
    start, remainder = divmod(ordered.__array_interface__["data"][0]
                              - root.__array_interface__["data"][0], root.itemsize)
    if remainder or start < 0 or start + view.size > root.size:
        return None
    return slice(start, start + view.size), ordered.shape, tuple(np.argsort(order).tolist())


def _permuted_index(view, root):
    """``(index, shape, axes)`` with ``view`` the very array ``root[index].reshape(shape)
    .transpose(axes)`` is: a transpose of a basic-indexing view with a negative step
    (``t[:, ::-1].T``), which neither ``index_in`` nor ``_permuted_run`` reaches alone."""
    if view.ndim < 2:
        return None
    order = sorted(range(view.ndim), key=lambda axis: -abs(view.strides[axis]))
    if order == list(range(view.ndim)):
        return None
    located = index_in(view.transpose(order), root)
    if located is None:
        return None
    return located[0], located[1], tuple(np.argsort(order).tolist())


def numpy_copies(context, out_leaves, output_atoms, atom_positions):
    """Give each result that is a reshape of another value where NumPy's reshape copied
    (``y = x.T * 2; return y, y.reshape(-1)``: NumPy's ``y`` is in Fortran order) a copy of
    its own: compiled code computes ``y`` in C order, where the reshape is a view, and its
    wrapper would make the result a view of ``y`` (a write into one showing in the other,
    unlike NumPy's). The trace's values are NumPy's, so they tell."""
    producers = {item.out.name: item for item in context.body if isinstance(item, Eqn)}
    for index, position in sorted(atom_positions.items()):
        atom, leaf = output_atoms[position], out_leaves[index]
        value = getattr(leaf, "raw_value", None)
        if not isinstance(atom, Var) or type(value) is not np.ndarray:
            continue
        var, reshaped = atom, False
        while (eqn := producers.get(var.name)) is not None and eqn.prim.name in VIEWS and (
                isinstance(eqn.inputs[0], Var)):
            reshaped = reshaped or eqn.prim.name == "reshape"
            var = eqn.inputs[0]
        # (views of arguments: argument_views' business, and NumPy's there)
        root = context.values.get(var.name, (None,))[0] if (
            var is not atom and var.name in producers) else None
        if reshaped and type(root) is np.ndarray and root.size > 1 and not np.shares_memory(
                value, root):
            copy = context.new_var(atom.aval)
            context.body.append(Eqn(cast_p, (atom,), (("dtype", atom.aval.dtype),), copy))
            output_atoms[position] = copy


# What NumPy returns from an argument that the trace holds as a copy or a gather, and the
# call makes from the caller's array instead when it is a result (``OutputPlan.numpy_results``)
NUMPY_RESULTS = ("ascontiguousarray", "diagonal")


def note_numpy_result(result, source, kind, params=()):
    """``result`` (a traced value) is NumPy's ``kind`` of ``source``, an argument or a view
    of one: ``np.ascontiguousarray(x)`` (the trace's copy; NumPy's is ``x`` itself, or the
    view, where C-contiguous) or ``np.diagonal(x, *params)`` (the trace's gather; NumPy's
    is a read-only view of ``x``)."""
    noted = result.context.__dict__.setdefault("numpy_results", {})
    noted[id(result)] = (result, source, kind, params)


def contiguous_copy_of(copy, array):
    """Whether ``copy`` is the trace's ``np.ascontiguousarray`` (copy) of ``array``."""
    entry = copy.context.__dict__.get("numpy_results", {}).get(id(copy))
    return entry is not None and entry[0] is copy and entry[1] is array and (
        entry[2] == "ascontiguousarray")


def contiguous_sources(context, out_leaves):
    """``{result leaf index: source}`` for results that are ``np.ascontiguousarray`` of a
    view (``x[1:]``): ``argument_views`` makes that view of an updated argument from the
    caller's array, and the call hands it to NumPy (``numpy_results``' ``rebased``)."""
    noted = context.__dict__.get("numpy_results")
    if not noted or context.tensor_arguments:
        return {}
    found = {}
    for index, leaf in enumerate(out_leaves):
        entry = noted.get(id(leaf))
        if entry is not None and entry[0] is leaf and entry[2] == "ascontiguousarray" and (
                hasattr(entry[1], "ir_var")):
            found[index] = entry[1]
    return found


def numpy_results(context, out_leaves, output_atoms, atom_positions, arguments,
                  rebased=frozenset()):
    """``{result leaf: (argument leaf or None, kind, params)}`` for the results noted by
    ``note_numpy_result``: the call makes them from the caller's argument as NumPy does
    (the program's value of a diagonal is unused; ``np.ascontiguousarray`` of a
    non-contiguous argument is the program's copy). Of an array read from outside
    (``self.W``) or a view of an argument (None), the result becomes the program's
    input or view (the outside array itself, NumPy's view of the argument), which the
    call hands to NumPy; ``rebased``: results whose output is already the caller's view
    of an updated argument (``contiguous_sources``). With Tensor arguments the trace's
    values stay (a Tensor is no ndarray NumPy would return)."""
    noted = context.__dict__.get("numpy_results")
    if not noted or context.tensor_arguments:
        return {}
    found = {}
    producers = None
    for index, position in atom_positions.items():
        entry = noted.get(id(out_leaves[index]))
        if entry is None or entry[0] is not out_leaves[index]:
            continue
        _, source, kind, params = entry
        argument = next((leaf for leaf, given in enumerate(arguments) if given is source),
                        None)
        if argument is None and index in rebased:  # the caller's view (argument_views)
            found[index] = (None, kind, params)
            continue
        if argument is None and kind == "diagonal" and isinstance(source.ir_var, Var):
            if producers is None:
                producers = {item.out.name: item for item in context.body
                             if isinstance(item, Eqn)}
            if viewed_value(source.ir_var, producers).name in producers:
                # of an array the call made (t = x @ x.T; return t, t.diagonal()): NumPy's
                # read-only view of the program's array, the very one returned as t
                output_atoms[position] = source.ir_var
                found[index] = (None, kind, params)
                continue
        if argument is None and (context.mutated or context.outside_mutations or not (
                isinstance(output_atoms[position], Var) and isinstance(source.ir_var, Var))
                or kind == "diagonal" and not any(
                    source is given for given in context.implicit_tracers.values())):
            continue  # (a view of an updated array: of the update, not the caller's)
        if argument is None:
            output_atoms[position] = source.ir_var  # the wrapper's array: W, or x's view
        found[index] = (argument, kind, params)
    return found


def numpy_result(kind, params, source):
    """NumPy's result ``kind`` of ``source`` (the caller's argument, or the view of it)."""
    if kind == "diagonal":
        return np.diagonal(source, *params)
    return np.ascontiguousarray(source)


def _an_array(leaf):
    """Whether a result leaf is a traced array (not a NumPy scalar, not a constant)."""
    return hasattr(leaf, "ir_var") and type(known_kind(leaf.raw_value)) is np.ndarray
