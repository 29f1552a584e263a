"""The back-end's build directory: ``npu compile MODEL --target DEV -o DIR`` and ``npu run DIR``.

A build directory is self-contained (every path in it is relative to it):

| file | what |
|---|---|
| ``model.nac`` (+ ``model.safetensors`` for external weights) | the model as compiled |
| ``quant.json`` | activation quantisation per tensor (by NAC instruction index), |
|  | weight scales per layer |
| ``model.nem`` | the lowered NEM program; ``device.nem`` (and the files it includes) its device |
| ``model.bin``, ``model.image.safetensors`` | the bound task binary, its memory image |
| ``manifest.json`` | inputs and outputs: DDR buffer, stored and model shapes, dtype, quantisation |
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nem.binder import bind, plan_from_binary
from nem.checker import check_file
from nem.emit import emit_program
from nem.lower import plan_layers
from nem.memimage import MemoryImageError, build_image, read_image, write_image
from nem.modelgraph import GraphError, evaluate, read_graph
from nem.numerics import QuantParams, dequantize_codes, quantize_real
from nem.quantize import calibrate, load_calibration
from nem.target import SHIPPED, resolve_target
from nem.taskformat import TaskFormatError, decode, encode

__all__ = ["BuildError", "PreparedRun", "compile_model", "decode_outputs", "execute_prepared",
           "layer_report", "load_build", "prepare_run", "run_build"]

MANIFEST_VERSION = 1


class BuildError(ValueError):
    """A build directory or run input that cannot be used (names the file and field)."""


def _model_batch(graph, values):
    return int(values[graph.inputs[0]].shape[0]) if graph.inputs else 1


def _to_stored(x):
    """Model layout -> stored layout: NCHW -> NHWC for 4-D values."""
    return np.transpose(x, (0, 2, 3, 1)) if x.ndim == 4 else x


def _from_stored(q, entry):
    """Stored bytes of an output -> the model's layout."""
    stored = q.reshape(entry["stored_shape"])
    if entry.get("nhwc_flat"):
        h, w, c = entry["nhwc_flat"]
        n = stored.shape[0]
        return stored.reshape(n, h, w, c).transpose(0, 3, 1, 2).reshape(entry["shape"])
    if stored.ndim == 4:
        return stored.transpose(0, 3, 1, 2)
    return stored.reshape(entry["shape"])


def compile_model(nac_path, target_spec, out_dir, *, calibration=None, samples=None,
                  method="minmax", percentile=99.99, batch=None, argmax=False):
    """Lower a ``.nac`` file for a target into a build directory.

    Parameters
    ----------
    nac_path : path-like
        The model (its external weights next to it, as ``nac.weights.write_nac`` puts them).
    target_spec : str
        ``small``, ``sim`` or a device file.
    out_dir : path-like
        Created if needed; files in it are replaced.
    calibration : path-like, optional
        ``.npz`` with one array per model input (samples along axis 0).
    samples : list of numpy.ndarray, optional
        Calibration arrays given directly (instead of ``calibration``); without either the
        compile refuses.
    method : {"minmax", "percentile"}
    percentile : float
    batch : int, optional
        The model's batch (the first dimension of its inputs). By default the batch of the
        first reshape in the model, else 1.
    argmax : bool
        Append an argmax head on the CSTL: the output is the i32 index of the largest value
        along the last axis (``--on float`` applies the same argmax to the float output).

    Returns
    -------
    dict
        The manifest (also written to ``manifest.json``), with a ``report`` entry.
    """
    from nac.weights import read_nac

    started = time.perf_counter()
    nac_path = Path(nac_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    nac = read_nac(nac_path)
    graph = read_graph(nac)
    target = resolve_target(target_spec)
    if calibration is not None:
        samples = load_calibration(calibration, graph)
    if samples is None:
        raise BuildError("no calibration data: give --calibration FILE.npz")
    probe = [np.asarray(s, dtype=np.float32) for s in samples]
    for s in probe:
        if s.ndim == 0:
            raise BuildError("calibration arrays need samples along axis 0")
    values = _first_values(graph, probe, batch)  # the shapes, at the model's batch
    batch = _model_batch(graph, values)
    ranges = calibrate(graph, probe, batch, method=method, percentile=percentile)
    layers, acts = plan_layers(graph, values, ranges, target, argmax=argmax)
    for name, text in target.files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text, encoding="utf-8")
    shutil.copyfile(nac_path, out / "model.nac")
    ext = nac_path.with_suffix(".safetensors")
    if ext.is_file():
        shutil.copyfile(ext, out / "model.safetensors")
    for serial in (False, True):
        emitted = emit_program(layers, acts, graph.inputs, graph.outputs, target, serial=serial)
        (out / "model.nem").write_text(f'device "{target.device_file}"\n' + emitted.text,
                                       encoding="utf-8")
        checked = check_file(out / "model.nem")
        errors = [d for d in checked.diagnostics if d.severity == "error"]
        # too few tokens for the pipelined order (E902): fall back to one task at a time
        if checked.ok or serial or any(d.code != "E902" for d in errors):
            break
    if not checked.ok:
        raise BuildError("the lowered program does not check:\n" +
                         "\n".join(str(d) for d in errors[:10]))
    program = bind(checked)
    binary = encode(program)
    (out / "model.bin").write_bytes(binary)
    image = build_image(program, checked.plan, emitted.initial)
    write_image(out / "model.image.safetensors", image)

    def entry(index):
        a = acts[index]
        return {"instruction": index, "buffer": a.buffer, "shape": list(a.logical),
                "stored_shape": list(a.shape), "dtype": a.elem,
                "layout": "NHWC" if len(a.shape) == 4 else "row-major",
                "nhwc_flat": list(a.nhwc_flat) if a.nhwc_flat else None,
                "quant": None if a.quant is None else
                {"kind": "per_tensor", "scale": a.quant.scale,
                 "zero_point": a.quant.zero_point}}

    quant = {"activations": {str(i): dict(a.quant.as_json(), buffer=a.buffer)
                             for i, a in sorted(acts.items()) if a.quant is not None},
             "layers": [{"instruction": layer.index, "op": layer.op,
                         "output": layer.out.index,
                         "activation": layer.activation,
                         "weight_scales": None if layer.w_scales is None
                         else [float(s) for s in layer.w_scales]} for layer in layers],
             "calibration": {"method": method, "percentile": percentile if
                             method == "percentile" else None, "samples": len(probe[0])}}
    (out / "quant.json").write_text(json.dumps(quant, indent=1) + "\n", encoding="utf-8")
    manifest = {
        "version": MANIFEST_VERSION,
        "target": target_spec if target_spec in SHIPPED else target.device_file,
        "device": target.device.name,
        "files": {"nac": "model.nac", "nem": "model.nem", "binary": "model.bin",
                  "image": "model.image.safetensors", "device": target.device_file,
                  "quant": "quant.json"},
        "head": "argmax" if argmax else None,
        "inputs": [entry(i) for i in graph.inputs],
        "outputs": [entry(i) for i in graph.outputs],
        "layers": [{"instruction": layer.index, "op": layer.op, "unit":
                    "NMU" if layer.kind in ("conv", "gemm") else "CSTL",
                    "macs": layer.macs} for layer in layers],
        # the layer of every task of the binary, in stream order, and whether it loads the
        # layer's weights (prefetched during the layer before): the per-layer report
        "task_layers": [[emitted.task_layer[t.label.split(" ")[0]], t.label.startswith("w")]
                        for t in checked.plan.tasks],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    manifest["report"] = {"compile_seconds": time.perf_counter() - started,
                          "tasks": len(program.tasks), "tiles": emitted.tiles,
                          "weight_groups": emitted.groups, "slots": emitted.slots,
                          "serial": serial,
                          "binary_bytes": len(binary)}
    return manifest


def _first_values(graph, samples, size=None):
    """Values of one float evaluation at the model's batch (they give every shape).

    The batch is ``size`` when given, else the first dimension of the model's first reshape
    (a static shape in the file), else 1.
    """
    for node in graph.nodes:
        if size is not None:
            break
        if node.kind == "op" and node.name == "nac.view" and isinstance(node.args[1], list):
            size = int(node.args[1][0])
    size = size or 1
    take = np.arange(size) % len(samples[0])
    try:
        return evaluate(graph, [s[take] for s in samples])
    except (ValueError, TypeError, IndexError) as exc:
        raise GraphError(f"the calibration data (batch {size}) does not fit the model: "
                         f"{exc}") from None


def load_build(build_dir):
    """Read ``manifest.json`` of a build directory; paths resolved against it."""
    d = Path(build_dir)
    path = d / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BuildError(f"{path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BuildError(f"{path}:{exc.lineno}:{exc.colno}: {exc.msg}") from None
    if not isinstance(manifest, dict) or manifest.get("version") != MANIFEST_VERSION:
        raise BuildError(f"{path}: field 'version': expected {MANIFEST_VERSION}")
    for key in ("files", "inputs", "outputs", "layers"):
        if key not in manifest:
            raise BuildError(f"{path}: missing field {key!r}")
    files = manifest["files"]
    if not isinstance(files, dict):
        raise BuildError(f"{path}: field 'files': an object, not {files!r}")
    for key in ("nac", "binary", "image"):
        name = files.get(key)
        if not isinstance(name, str) or Path(name).is_absolute() or ".." in Path(name).parts:
            raise BuildError(f"{path}: field 'files.{key}': a file name inside the build "
                             f"directory, not {name!r}")
    for side in ("inputs", "outputs"):
        if not isinstance(manifest[side], list):
            raise BuildError(f"{path}: field {side!r}: a list")
        for k, e in enumerate(manifest[side]):
            _check_entry(path, f"{side}[{k}]", e)
    return manifest


def _check_entry(path, where, e):
    def bad(field, want):
        value = e.get(field) if isinstance(e, dict) else e
        raise BuildError(f"{path}: field '{where}.{field}': {want}, not {value!r}")

    if not isinstance(e, dict):
        bad("", "an object")
    if not isinstance(e.get("buffer"), str):
        bad("buffer", "a buffer name")
    for field in ("shape", "stored_shape"):
        dims = e.get(field)
        if not (isinstance(dims, list) and dims and all(isinstance(v, int) and v > 0
                                                        for v in dims)):
            bad(field, "a list of positive integers")
    if int(np.prod(e["shape"])) != int(np.prod(e["stored_shape"])):
        bad("stored_shape", f"as many elements as shape {e['shape']}")
    if e.get("dtype") not in ("i8", "i32"):
        bad("dtype", "i8 or i32")
    q = e.get("quant")
    if e["dtype"] == "i8":
        if not (isinstance(q, dict) and isinstance(q.get("scale"), (int, float)) and
                q["scale"] > 0 and isinstance(q.get("zero_point"), int) and
                -128 <= q["zero_point"] <= 127):
            bad("quant", "{'scale': > 0, 'zero_point': -128..127}")
    flat = e.get("nhwc_flat")
    if flat is not None and not (isinstance(flat, list) and len(flat) == 3 and
                                 int(np.prod(flat)) * e["stored_shape"][0] ==
                                 int(np.prod(e["stored_shape"]))):
        bad("nhwc_flat", "null or [H, W, C] of the stored elements")


def _qp(entry):
    q = entry["quant"]
    return QuantParams(np.array([float(q["scale"])]), np.array([int(q["zero_point"])]))


@dataclass
class PreparedRun:
    """A build directory's bound binary with its initial memory for one set of inputs.

    Attributes
    ----------
    directory : pathlib.Path
    manifest : dict
        :func:`load_build`'s manifest.
    binary : bytes
        ``model.bin`` as stored.
    program : nem.taskformat.Program
        The decoded binary.
    plan : nem.checker.Plan
        The executor's plan of the binary (``nem.binder.plan_from_binary``).
    device : nem.device.Device
        The device ``model.nem`` names.
    labels : list of str
        Source labels of the tasks in stream order (``model.nem``).
    initial : dict of str to numpy.ndarray
        Buffer name -> initial bytes: the memory image's loads plus the quantised inputs.
    program_address : int
        DDR byte address of the binary (the memory image's).
    """

    directory: Path
    manifest: dict
    binary: bytes
    program: object
    plan: object
    device: object
    labels: list
    initial: dict
    program_address: int


def _check_inputs(manifest, inputs):
    if len(inputs) != len(manifest["inputs"]):
        raise BuildError(f"the model has {len(manifest['inputs'])} input(s), {len(inputs)} "
                         f"given")
    for k, (x, e) in enumerate(zip(inputs, manifest["inputs"], strict=True)):
        if list(np.shape(x)) != e["shape"]:
            raise BuildError(f"input {k}: shape {list(np.shape(x))}, the model takes "
                             f"{e['shape']}")


def prepare_run(build_dir, inputs):
    """Decode a build directory's binary and fix its initial memory for ``inputs``.

    Parameters
    ----------
    build_dir : path-like
    inputs : list of numpy.ndarray
        Float inputs in the model's layout (NCHW), one per model input; quantised with the
        manifest's parameters (NCHW -> NHWC) into their DDR buffers.

    Returns
    -------
    PreparedRun

    Raises
    ------
    BuildError
        A missing, unreadable or inconsistent file of the build directory (named), or
        inputs of the wrong number or shape.
    """
    d = Path(build_dir)
    manifest = load_build(d)
    _check_inputs(manifest, inputs)
    files = manifest["files"]
    path = d / files["binary"]
    try:
        binary = path.read_bytes()
        program = decode(binary)
    except OSError as exc:
        raise BuildError(f"{path}: {exc.strerror or exc}") from None
    except TaskFormatError as exc:
        raise BuildError(f"{path}: {exc}") from None
    nem = d / files.get("nem", "model.nem")
    checked = check_file(nem)
    if not checked.ok or checked.device is None:
        first = next((str(x) for x in checked.diagnostics), "no device")
        raise BuildError(f"{nem}: {first}")
    device = checked.device
    try:
        plan = plan_from_binary(program, device)
    except TaskFormatError as exc:
        raise BuildError(f"{path}: does not belong to {nem.name}: {exc}") from None
    image_path = d / files["image"]
    try:
        image = read_image(image_path, program)
    except MemoryImageError as exc:
        raise BuildError(str(exc)) from None
    initial = image.initial()
    buffers = {b.name: b for b in program.buffers}
    for k, (x, e) in enumerate(zip(inputs, manifest["inputs"], strict=True)):
        if e["buffer"] not in buffers:
            raise BuildError(f"{d / 'manifest.json'}: field 'inputs[{k}].buffer': "
                             f"{e['buffer']!r} is no buffer of {path.name}")
        codes = quantize_real(_to_stored(np.asarray(x, dtype=np.float64)), "i8", _qp(e))
        raw = np.frombuffer(codes.tobytes(), np.uint8)
        if raw.size > buffers[e["buffer"]].size:
            raise BuildError(f"{d / 'manifest.json'}: input {k} needs {raw.size} bytes, "
                             f"buffer {e['buffer']} has {buffers[e['buffer']].size}")
        initial[e["buffer"]] = raw
    labels = [t.label for t in checked.plan.tasks] if checked.plan is not None else []
    if len(labels) != len(program.tasks):
        labels = [f"task {k}" for k in range(len(program.tasks))]
    return PreparedRun(d, manifest, binary, program, plan, device, labels, initial,
                       image.program_address)


def decode_outputs(manifest, buffer):
    """The model's outputs from the final memory of a run.

    Parameters
    ----------
    manifest : dict
    buffer : callable
        ``buffer(name)`` -> the final bytes (uint8) of a DDR buffer.

    Returns
    -------
    list of numpy.ndarray
        Dequantised float32 outputs in the model's layout; i32 class indices for the argmax
        head.
    """
    outs = []
    for k, e in enumerate(manifest["outputs"]):
        raw = np.asarray(buffer(e["buffer"]), dtype=np.uint8).reshape(-1)
        width = 4 if e["dtype"] == "i32" else 1
        need = width * int(np.prod(e["stored_shape"]))
        if raw.size < need:
            raise BuildError(f"output {k}: buffer {e['buffer']} holds {raw.size} bytes, the "
                             f"output needs {need}")
        if e["dtype"] == "i32":  # the argmax head's indices
            outs.append(raw[:need].view("<i4").reshape(e["shape"]).astype(np.int32))
            continue
        codes = _from_stored(raw[:need].view(np.int8), e)
        outs.append(dequantize_codes(codes, _qp(e)).astype(np.float32))
    return outs


def run_build(build_dir, inputs, *, on="executor"):
    """Run a compiled model.

    Parameters
    ----------
    build_dir : path-like
    inputs : list of numpy.ndarray
        Float inputs in the model's layout (NCHW), one per model input.
    on : {"float", "executor"}
        ``float``: the NAC golden runtime on ``model.nac``; ``executor``: quantise the
        inputs, run the bound binary in the NEM executor, dequantise the outputs. (The RTL
        runs through ``sim.model_run``, which the hardware side of the CLI calls.)

    Returns
    -------
    (list of numpy.ndarray, nem.executor.RunResult or None)
    """
    d = Path(build_dir)
    if on == "float":
        from nac.runtime import run
        from nac.weights import read_nac

        manifest = load_build(d)
        _check_inputs(manifest, inputs)
        outs = [np.asarray(v) for v in run(read_nac(d / manifest["files"]["nac"]),
                                           list(inputs))]
        if manifest.get("head") == "argmax":
            outs = [o.argmax(axis=-1).astype(np.int32) for o in outs]
        return outs, None
    if on != "executor":
        raise BuildError(f"--on must be float or executor, not {on!r}")
    result = execute_prepared(prepare_run(d, inputs))
    return decode_outputs(load_build(d), result.memory.buffer), result


def execute_prepared(prep):
    """The executor's run of a :class:`PreparedRun` (in stream order, as the SEQ issues)."""
    from nem.executor import execute

    return execute(prep.plan, prep.device, dict(prep.initial), in_order=True)


def layer_report(manifest, result):
    """Per layer of a build, from an executor run of its binary.

    Parameters
    ----------
    manifest : dict
        :func:`load_build`'s manifest (``task_layers`` maps binary tasks to layers).
    result : nem.executor.RunResult

    Returns
    -------
    list of dict
        Per layer: ``instruction``, ``op``, ``unit``, ``tasks``, ``first`` and ``last``
        cycle of its tiles' tasks (weight loads, prefetched during the layer before, count in
        ``tasks`` and ``bytes`` only), ``compute_cycles`` (its compute tasks), ``macs``,
        ``utilisation`` (MACs over what the NMU could do from ``first`` to ``last``) and
        ``bytes`` per path of its copies.
    """
    owners = manifest.get("task_layers") or []
    rows = [dict(layer, tasks=0, first=None, last=0, compute_cycles=0, bytes={}, rate=0)
            for layer in manifest["layers"]]
    for record in result.records:
        if record.index >= len(owners):
            continue
        number, weights = owners[record.index]
        row = rows[number]
        row["tasks"] += 1
        if not weights:
            row["first"] = record.start if row["first"] is None else min(row["first"],
                                                                          record.start)
            row["last"] = max(row["last"], record.end)
        if record.path:
            row["bytes"][record.path] = row["bytes"].get(record.path, 0) + record.nbytes
        else:
            row["compute_cycles"] += record.end - record.start
            row["rate"] = max(row["rate"], record.macs_per_cycle)
    for row in rows:
        span = row["last"] - (row["first"] or 0)
        rate = row.pop("rate")
        row["utilisation"] = row["macs"] / (rate * span) if rate and span else 0.0
    return rows
