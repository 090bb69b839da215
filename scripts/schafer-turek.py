#!/usr/bin/env python3
"""Writes the Schäfer–Turek 3D-1Z case at N nodes across the cylinder from examples/cylinder-3d.toml.

    python3 scripts/schafer-turek.py N UM STEPS OUT.toml
    thelma run --config OUT.toml --backend cuda -o out-N

The channel is 25N x 4.1N x 4.1N nodes (N a multiple of 10 keeps 4.1N whole), the cylinder's
centre at node (5N - 1/2, 2N - 1/2), UM the inlet's peak in lattice units; the viscosity keeps
Re = 20 and the force coefficients' reference area and velocity follow. The coefficients are the
last lines of forces.csv.
"""
import sys

n, um, steps, out = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
src = open("examples/cylinder-3d.toml").read()
h = round(4.1 * n)
ubar = 4.0 / 9.0 * um
nu = ubar * n / 20.0
edits = [
    ("size = [500, 82, 82]", f"size = [{25 * n}, {h}, {h}]"),
    ("centre = [99.5, 39.5, 0.0]", f"centre = [{5 * n - 0.5}, {2 * n - 0.5}, 0.0]"),
    ("radius = 10.0", f"radius = {n / 2}"),
    ("velocity = [0.04, 0.0, 0.0]", f"velocity = [{um}, 0.0, 0.0]"),
    ("viscosity = 0.017777777777777778", f"viscosity = {nu!r}"),
    ('"0.04 * 16', f'"{um} * 16'),
    ("area = 1640.0", f"area = {float(n * h)}"),
    ("velocity = 0.017777777777777778  #", f"velocity = {ubar!r}  #"),
    ("at = [139.5, 39.5, 40.5]", f"at = [{7 * n - 0.5}, {2 * n - 0.5}, {(h - 1) / 2}]"),
    ("steps = 60000", f"steps = {steps}"),
    ("every = 500", f"every = {max(100, steps // 60)}"),
]
for old, new in edits:
    if old not in src:
        sys.exit(f"examples/cylinder-3d.toml no longer has `{old}`")
    src = src.replace(old, new)
open(out, "w").write(src)
