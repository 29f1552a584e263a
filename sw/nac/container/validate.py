"""Cross-section checks of a parsed file: OPS against PERM, CNST, DATA and CMAP; MMAP
against OPS."""

from __future__ import annotations

from nac.container.arguments import _argument_error
from nac.encoding import REGULAR_OP_MIN, STANDARD_OPS, MmapAction, SystemOp
from nac.errors import NacFormatError


def _validate_ops(nac, offsets):
    """Cross-section checks of OPS (ids exist, offsets point back, C/D agree)."""
    perm = dict(nac.perm or ())
    cnst = dict(nac.cnst or ())
    params = dict(nac.data.params) if nac.data else {}
    cmap = dict(nac.cmap or ())
    section = "OPS "
    for index, ins in enumerate(nac.ops or ()):
        where = {"section": section, "offset": offsets[index]}
        if ins.a >= REGULAR_OP_MIN:
            if ins.a not in STANDARD_OPS and ins.a not in cmap:
                raise NacFormatError(f"instruction {index}: operation id {ins.a} is neither "
                                     f"standard nor in CMAP", field=f"instruction[{index}].A",
                                     value=ins.a, **where)
            if ins.b:
                problem = _argument_error(ins, index, len(perm[ins.b]))
                if problem:
                    field_name, value, message = problem
                    raise NacFormatError(f"instruction {index}: {message}",
                                         field=f"instruction[{index}].{field_name}",
                                         value=value, **where)
            for cid in ins.const_ids:
                if cid not in cnst:
                    raise NacFormatError(f"instruction {index}: constant id {cid} is not in "
                                         f"CNST", field=f"instruction[{index}].C", value=cid,
                                         **where)
        elif ins.a == SystemOp.INPUT and ins.b == 1:
            if ins.const_ids[0] not in params:
                raise NacFormatError(f"instruction {index}: parameter id {ins.const_ids[0]} is "
                                     f"not in DATA", field=f"instruction[{index}].C",
                                     value=ins.const_ids[0], **where)
        elif ins.a == SystemOp.INPUT and ins.b == 3:
            if ins.const_ids[0] not in cnst:
                raise NacFormatError(f"instruction {index}: lifted constant id "
                                     f"{ins.const_ids[0]} is not in CNST",
                                     field=f"instruction[{index}].C", value=ins.const_ids[0],
                                     **where)
        elif ins.a in (SystemOp.OUTPUT, SystemOp.CONTROL_FLOW):
            for d in ins.d:
                if not (d and 0 <= index + d < index):
                    raise NacFormatError(f"instruction {index}: D offset {d} does not name an "
                                         f"earlier instruction", field=f"instruction[{index}].D",
                                         value=d, **where)


def _validate_mmap(nac, offsets):
    n = len(nac.ops or ())
    params = {i for i, ins in enumerate(nac.ops or ()) if ins.a == SystemOp.INPUT and ins.b == 1}
    previous = -1
    for k, rec in enumerate(nac.mmap or ()):
        where = {"section": "MMAP", "offset": offsets[k]}
        if not 0 <= rec.tick < n:
            raise NacFormatError(f"record {k}: tick {rec.tick} is outside OPS ({n} "
                                 f"instructions)", field=f"record[{k}].tick", value=rec.tick,
                                 **where)
        if rec.tick <= previous:
            raise NacFormatError(f"record {k}: tick {rec.tick} does not follow tick {previous}",
                                 field=f"record[{k}].tick", value=rec.tick, **where)
        previous = rec.tick
        if not rec.commands:
            raise NacFormatError(f"record {k}: a record without commands",
                                 field=f"record[{k}].count", value=0, **where)
        for j, (action, target) in enumerate(rec.commands):
            ok = {MmapAction.SAVE_RESULT: target == rec.tick,
                  MmapAction.FREE: target < rec.tick,
                  MmapAction.FORWARD: rec.tick < target < n,
                  MmapAction.PRELOAD: target in params and target >= rec.tick}[action]
            if not ok:
                raise NacFormatError(f"record {k} (tick {rec.tick}): {action.name} target "
                                     f"{target} is not valid for this action",
                                     field=f"record[{k}].command[{j}].target", value=target,
                                     **where)
