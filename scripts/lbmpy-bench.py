"""The CPU module's yardstick: lbmpy's generated kernel (waLBerla's code generator) on a periodic
D3Q19 box, timed as `thelma bench --backend cpu --case` times the CPU module, for side-by-side runs
on one machine (PERFORMANCE.md, "The CPU module beside lbmpy").

Setup (not a dependency of thelma; a private virtual environment):
    python3 -m venv /tmp/lbenv && /tmp/lbenv/bin/pip install lbmpy==2.0   # pystencils 2.0 comes with it
Usage:
    /tmp/lbenv/bin/python scripts/lbmpy-bench.py N {mrt,srt} THREADS [STEPS] [--nontemporal]

The kernel: fused pull stream-collide, two lattices in structure-of-arrays layout (`fzyx`, one
array per direction as thelma's), f32, sizes, strides and relaxation rates compiled in, AVX-512
intrinsics (pystencils' X86_AVX512 target, -O3 -ffast-math), OpenMP over z with `THREADS` threads;
the periodic box through one ghost layer refreshed before every step. It prints two rates: the
kernel alone, and the step with the refresh (a single-threaded copy). MRT is
lbmpy's weighted-orthogonal D3Q19 MRT with the shear rate 1.6 and the other rates fixed (1.0–1.5);
SRT is BGK at ω = 1.6. The populations start at rest and stay so (a periodic box at rest), which
changes no cost: the kernel has no branch on values.
"""
import sys
import time

import numpy as np
import pystencils as ps
from lbmpy import LBMConfig, LBMOptimisation, LBStencil, Method, Stencil, create_lb_update_rule
from lbmpy.maxwellian_equilibrium import get_weights


def fail(msg):
    """Bad input: one line on stderr, exit 2."""
    print(f"lbmpy-bench: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    if len(args) < 3 or any(f != "--nontemporal" for f in flags):
        sys.exit(__doc__)
    nontemporal = "--nontemporal" in flags
    try:
        n, method, threads = int(args[0]), args[1], int(args[2])
        steps = int(args[3]) if len(args) > 3 else 40
    except ValueError as e:
        fail(f"N, THREADS and STEPS are integers ({e})")
    if min(n, threads, steps) < 1:
        fail("N, THREADS and STEPS must be at least 1")
    if method not in ("mrt", "srt"):
        fail(f"the method must be mrt or srt, not {method}")
    stencil = LBStencil(Stencil.D3Q19)
    dh = ps.create_data_handling(domain_size=(n, n, n), periodicity=True,
                                 default_target=ps.Target.CPU, default_layout="fzyx",
                                 default_ghost_layers=1)
    src = dh.add_array("src", values_per_cell=19, layout="fzyx", alignment=64, dtype=np.float32)
    dh.add_array_like("dst", "src")
    dst = dh.fields["dst"]
    omega = 1.6
    if method == "srt":
        cfg = LBMConfig(stencil=stencil, method=Method.SRT, relaxation_rate=omega, compressible=True)
    else:
        cfg = LBMConfig(stencil=stencil, method=Method.MRT,
                        relaxation_rates=[omega, 1.0, 1.2, 1.3, 1.4, 1.5], compressible=True)
    opt = LBMOptimisation(symbolic_field=src, symbolic_temporary_field=dst, field_layout="fzyx",
                          cse_global=True)
    rule = create_lb_update_rule(lbm_config=cfg, lbm_optimisation=opt)
    kcfg = ps.CreateKernelConfig(target=ps.Target.X86_AVX512, default_dtype="float32")
    kcfg.cpu.openmp.enable = True
    kcfg.cpu.openmp.num_threads = threads
    kcfg.cpu.vectorize.enable = True
    kcfg.cpu.vectorize.assume_inner_stride_one = True
    kcfg.cpu.vectorize.use_nontemporal_stores = nontemporal
    kernel = ps.create_kernel(rule, config=kcfg).compile()
    weights = np.array([float(w) for w in get_weights(stencil)], dtype=np.float32)
    dh.cpu_arrays["src"][...] = weights
    dh.cpu_arrays["dst"][...] = weights
    sync = dh.synchronization_function(["src"])

    def step():
        sync()
        dh.run_kernel(kernel)
        dh.swap("src", "dst")

    for _ in range(3):
        step()
    # The kernel alone (the box stays at rest, so skipping the ghost layers' refresh changes
    # nothing): what the generated code does. The refresh is pystencils' single-threaded numpy copy
    # of 26 ghost regions, about a quarter of a step at 128³ on two threads; thelma wraps its
    # periodic axes inside the step.
    t = time.perf_counter()
    for _ in range(steps):
        dh.run_kernel(kernel)
        dh.swap("src", "dst")
    kernel_only = n ** 3 * steps / (time.perf_counter() - t) / 1e6
    t = time.perf_counter()
    for _ in range(steps):
        step()
    with_sync = n ** 3 * steps / (time.perf_counter() - t) / 1e6
    print(f"lbmpy {method} n={n} threads={threads} nontemporal={int(nontemporal)}: "
          f"{kernel_only:.1f} MLUPS (kernel), {with_sync:.1f} MLUPS (with the ghost-layer refresh)")


if __name__ == "__main__":
    main()
