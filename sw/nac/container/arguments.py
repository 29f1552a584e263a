"""Gathering the arguments of a regular instruction (§3.4-3.5, §8.3)."""

from __future__ import annotations

from dataclasses import dataclass

from nac.errors import NacFormatError

__all__ = ["Argument", "gather_arguments"]


@dataclass(frozen=True)
class Argument:
    """One gathered argument (§8.3): an ancestor's absolute index, or a constant id."""

    is_const: bool
    value: int


def _argument_error(ins, index, signature_length):
    """Why the arguments of regular instruction *ins* cannot be gathered, or None."""
    if len(ins.d) != signature_length:
        return "D", None, f"D has {len(ins.d)} entries, the signature has {signature_length}"
    zeros = 0
    for d in ins.d:
        if d == 0:
            zeros += 1
        elif not 0 <= index + d < index:
            return "D", d, f"D offset {d} names instruction {index + d}, not an earlier one"
    n_consts = len(ins.c) - 1 if ins.c else 0
    if zeros != n_consts:
        return "C", None, f"C has {n_consts} constant ids, D has {zeros} zeros"
    return None


def gather_arguments(instruction, index, perm):
    """Gather the arguments of a regular instruction (§3.4-3.5, §8.3).

    Parameters
    ----------
    instruction : Instruction
    index : int
        The instruction's index in OPS.
    perm : dict of int to str
        Signature table.

    Returns
    -------
    tuple of Argument
        Per signature character: ``D[i] != 0`` gives ancestor ``index + D[i]`` (whatever
        the code); ``D[i] == 0`` takes the next constant id of C.

    Raises
    ------
    NacFormatError
        Unknown signature, D length not the signature length, ancestor outside
        ``[0, index)``, or zeros in D not matching the C count.
    """
    ins = instruction
    if ins.b == 0:
        return ()
    if ins.b not in perm:
        raise NacFormatError(f"instruction {index}: signature {ins.b} is not in PERM",
                             section="OPS ", field="B", value=ins.b)
    problem = _argument_error(ins, index, len(perm[ins.b]))
    if problem:
        field_name, value, message = problem
        raise NacFormatError(f"instruction {index}: {message}", section="OPS ",
                             field=field_name, value=value)
    consts = iter(ins.const_ids)
    return tuple(Argument(False, index + d) if d else Argument(True, next(consts))
                 for d in ins.d)
