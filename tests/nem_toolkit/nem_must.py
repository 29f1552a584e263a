"""Every MUST / MUST NOT of ``nem.md``, and how the conformance corpus covers it.

Each entry: the corpus rule label that covers the statement (cases name it in ``rule:``),
a short quote locating it in the spec, and the kind of coverage:

* ``"checked"`` -- decidable on a program or device file: the corpus has at least one case
  without diagnostics and one with (an error, or the warning the spec asks for);
* ``"tool"`` -- an obligation of this toolkit itself, tested in the named test module;
* ``"binder"`` -- an obligation of binders at lowering time that no program text can
  violate; the toolkit records what the binder needs (noted) but there is nothing to reject;
* ``"inexpressible"`` -- forbids something the language has no syntax for;
* ``"registry"`` -- constrains how the opcode registry defines opcodes, not programs.

Statements about the specification document itself ("With this document alone, it MUST be
possible to ...") are not rules of the language and are left out.
"""

from __future__ import annotations

MUST_RULES: list[tuple[str, str, str]] = [
    # Abstract Machine Model
    ("binder", "Execution Units: WDM absent", "When WDM is absent ... the binder MUST use "
     "uncompressed DMA paths (the device's WDM count is kept in Device.device_units)"),
    ("checked", "MUST Execution Units: SEQ is not an execution target",
     "Programs MUST NOT reference SEQ as an execution target"),
    # Core Program Objects
    ("checked", "MUST Buffers: sub-byte buffer size",
     "the size MUST be at least ceil(total_elements * bitwidth(E) / 8) bytes"),
    ("checked", "MUST Buffers: sizes are whole bytes",
     "Buffer sizes MUST be whole numbers of bytes"),
    ("inexpressible", "Buffers: no physical addresses",
     "Programs MUST NOT assume physical addresses, banking, slice mapping"),
    ("checked", "MUST Regions: byte-aligned offsets", "Byte offsets MUST be byte-aligned"),
    # Type System
    ("checked", "MUST Type System: compute operands are typed",
     "All regions participating in compute tasks MUST have fully specified types"),
    ("inexpressible", "Element Bitwidth: packing order",
     "Programs MUST NOT depend on a specific intra-byte packing order"),
    ("checked", "MUST Quantization: per_channel lengths",
     "scales and zero_points arrays MUST have length equal to dim[axis]"),
    ("checked", "MUST Quantization: per_group lengths",
     "arrays MUST have length ceil(dim[axis] / group_size)"),
    ("checked", "MUST Quantization: group_size positive", "group_size MUST be a positive integer"),
    ("binder", "Quantization Descriptor: semantics preserved",
     "Quantization semantics MUST be preserved by binders (descriptors are kept in the plan)"),
    # Extent Consistency
    ("checked", "MUST Extent Consistency: byte_extent",
     "byte_extent >= ceil(num_elements(S) * bitwidth(E) / 8)"),
    ("checked", "MUST Extent Consistency: sub-byte packing", "N elements of i4: ceil(N / 2) bytes"),
    ("checked", "MUST Extent Consistency: addressable elements in range",
     "Any element addressable via the declared layout or strides MUST fall within the range"),
    # Task Taxonomy
    ("checked", "MUST Transfer Tasks: compatible types",
     "Source and destination regions MUST have compatible types"),
    ("checked", "MUST Elementwise: identical shapes", "Input and output shapes MUST be identical"),
    ("checked", "MUST Elementwise: element types match",
     "Element types MUST match unless an explicit cast is present"),
    ("checked", "MUST Linear Algebra: compatible ranks and dimensions",
     "Operand ranks and dimensions MUST be compatible"),
    ("checked", "MUST Linear Algebra: accum_type specified",
     "An accumulation type (accum_type) MUST be specified or defaulted"),
    ("checked", "MUST Convolution: rank and layout constraints",
     "Input, weight, and optional bias regions MUST satisfy rank and layout constraints"),
    ("checked", "MUST Convolution: output shape derived",
     "Output shape is derived from input shape, kernel shape, pads, strides, dilations, groups"),
    ("checked", "MUST Convolution: accum_type specified",
     "accum_type MUST be specified or defaulted"),
    ("checked", "Type Family Matching Rule",
     "Binders and compilers MUST reject any program where an opcode instance does not match "
     "a legal family variant"),
    ("checked", "MUST Schema Rule 7: every MUST variant in opcode.mandatory",
     "all conformant NEM device configurations MUST include this family variant "
     "instantiation (MUST class; Conformance Rule)"),
    ("checked", "MUST Conformance Rule: MAY variants only where declared",
     "A device that supports additional MAY-class variants MUST declare them"),
    ("checked", "MUST Schema Rule 1: spec_version", "spec_version MUST identify the spec revision"),
    ("checked", "MUST Schema Rule 4: mandatory and extended disjoint",
     "opcode.mandatory and opcode.extended MUST be empty ... MUST ignore the redundant entry"),
    ("checked", "MUST Schema Rule 5: counts and sizes",
     "unit counts and num_engines MUST be >= 1; l1_size_bytes and l2_size_bytes MUST be > 0"),
    ("checked", "MUST Schema Rule 5: topology after resolution",
     "After device resolution a topology block MUST be present"),
    ("checked", "MUST Schema Rule 6: memory capacity",
     "The sum of all buffer sizes at a memory level MUST NOT exceed its capacity"),
    ("checked", "Device Validity Rule",
     "Binders MUST reject programs that use type combinations not in the effective set"),
    ("checked", "MUST Target Resource Validity Rule 1: exact match",
     "The binder MUST assign the task to that exact instance (TaskInstance.resource)"),
    ("checked", "MUST Target Resource Validity Rule 2: same-type remap",
     "The binder MUST remap to an available instance of the same type"),
    ("checked", "MUST Target Resource Validity Rule 3: cross-type translation",
     "The binder MUST translate the operation ... or reject the program"),
    ("checked", "MUST No Implicit Casts",
     "it MUST insert explicit conversion ops (cast, quantize, dequantize)"),
    ("checked", "MUST Quantization Constraints: int8 operands carry quant",
     "for INT8 inference variants, X and W MUST have valid quant descriptors"),
    # Decorators and execution semantics
    ("binder", "@materialized: not fused away",
     "The binder MUST NOT bypass or fuse away this region (kept in Region.decos)"),
    ("checked", "MUST Resource-invalid unit types",
     "Programs MUST NOT use @resource with these unit types (SEQ, sDMA, WDM)"),
    ("binder", "Materialization Semantics",
     "Regions marked @materialized MUST be produced as architectural values"),
    ("binder", "Determinism Semantics",
     "If @deterministic is present, the binder MUST choose ... strategies that preserve "
     "bitwise results (kept in TaskInstance.decos)"),
    ("checked", "MUST Task Placement: one L1 per task",
     "A task MUST NOT reference regions in L1[k] and L1[j] for k != j"),
    ("checked", "MUST Task Placement: @seq_engine",
     "If a task carries @seq_engine(k), it MUST be assigned to Engine k"),
    # Hazards
    ("checked", "MUST Hazards 1: overlapping writes ordered",
     "Overlapping regions with WRITE access MUST be ordered by dependencies"),
    ("checked", "MUST Hazards 2: overlapping transfers need @memmove",
     "Overlapping transfers require @memmove"),
    ("checked", "MUST Hazards 3: reuse proven safe by deps and bounded pipelining",
     "Region reuse MUST be proven safe via dependencies and bounded pipelining"),
    ("checked", "MUST Hazards 4: no out-of-bounds access", "Out-of-bounds access is invalid"),
    # Constants
    ("checked", "Constant Declarations 1",
     "The same identifier MUST NOT be declared more than once"),
    ("checked", "Constant Declarations 3", "The right-hand side MUST be a constant expression"),
    ("checked", "Constant Declarations 4",
     "An expr in a const declaration MUST NOT reference an identifier not declared before"),
    ("checked", "Constant Declarations 5", "Division by zero in a constant expression is an error"),
    ("checked", "Constant Declarations 6", "const declarations MUST NOT appear inside a loop body"),
    ("checked", "Constant Declarations 7",
     "A const identifier MUST NOT conflict with any other identifier in the same scope"),
    # Formal language definition
    ("checked", "MUST Include Semantics 3: circular includes rejected",
     "Implementations MUST detect and reject circular include chains"),
    ("checked", "MUST Include Semantics 5: included files are valid documents",
     "An included file MUST be a valid document"),
    ("checked", "MUST Operand rules: required operands present",
     "Operands marked required in the registry MUST be present"),
    ("checked", "MUST Operand rules: required attributes present",
     "All required attributes MUST be specified"),
    ("tool", "test_registry.py", "Tools MUST validate their opcode tables against the registry"),
    ("tool", "test_devices.py", "unknown keys are permitted and MUST be preserved by tools"),
    ("checked", "MUST SEQ.max_active_tokens",
     "The binder MUST ensure the lowered TCB stream does not exceed this limit"),
    ("checked", "MUST Inheritance Rule 2: derived devices do not set spec_version",
     "A derived device MUST NOT specify spec_version"),
    ("checked", "MUST Inheritance Rule 3: a derived device of an abstract parent provides a "
     "topology", "If the parent has no topology, the derived device MUST provide one"),
    ("checked", "MUST Inheritance Rule 7: parent defined before the child",
     "The parent device MUST be defined before the child"),
    ("checked", "MUST Inheritance Rule 8: opcode.mandatory non-empty",
     "the resolved device MUST satisfy all Schema Rules: ... opcode.mandatory MUST be non-empty"),
    ("checked", "Program Device Directive: absent",
     "When absent, the program is device-agnostic and a binder MUST determine the target"),
    # Appendix: type family notes
    ("checked", "MUST conv2d/gemm families: bias present iff the variant has it",
     "If the variant includes B, the program MUST provide a bias operand; if absent, it MUST NOT"),
    ("checked", "MUST conv2d/gemm families: int8 bias is i32",
     "If the program has bias in a different type, it MUST insert cast"),
    ("checked", "MUST conv2d/gemm families: accum_type equals the family's accum",
     "accum_type MUST equal the family's accum attribute"),
    ("checked", "MUST int4 families: weights carry quant",
     "The W (conv2d.int4) / B (gemm.int4) operand MUST carry a quant attribute"),
    ("checked", "MUST eltwise: binary inputs share a type",
     "For binary ops, both inputs MUST have the same element type"),
    ("checked", "MUST Extent Consistency: byte_extent",
     "If the opcode changes layout/strides, the region byte-extent consistency rules MUST "
     "still hold (view family note 1)"),
    ("registry", "Opcode attributes: rounding and saturation",
     "saturation or special rounding ... MUST be specified as opcode attributes (eltwise "
     "note 2, cast note 2)"),
    ("checked", "MUST No Implicit Casts", "cast MUST be explicit (cast note 1)"),
    ("checked", "MUST view: reshape preserves the element count",
     "For reshape, element count MUST be preserved"),
    ("checked", "MUST norm: scale and bias match T",
     "When scale and/or bias operands are present, their element type MUST match T"),
    ("checked", "MUST softmax: identical shapes", "Input and output shapes MUST be identical"),
    ("checked", "MUST quantize: destination carries quant",
     "Destination MUST carry quant metadata"),
    ("checked", "MUST dequantize: source carries quant", "Source MUST carry valid quant metadata"),
]
