"""IR to SPIR-V words: the module builder (module.py, sections in the spec's logical layout), the lowering of
statements, memory, vectors, adstacks, bounds checks, prints and subgroup-reduced atomics (lower*.py),
lavapipe's loop cap (loop_cap.py, lower_loop_cut.py), the generated grammar (spec.py) and the Khronos tools
(tools.py).

May import: ir, types, errors. It emits words and never touches a device or autodiff."""
