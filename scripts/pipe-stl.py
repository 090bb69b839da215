#!/usr/bin/env python3
"""Writes examples/pipe.stl: a square block with a round bore through it along x, the wall of a
pipe. The bore has radius 1 and runs from x = 0 to x = 10 (five diameters); the block's section is
the square |y|, |z| <= 1.25. The bore is a regular polygon of 128 sides inscribed in the circle (its
area 0.9996 of the circle's: the radius of equal area is 0.9998). 1,024 triangles, outward-facing,
ASCII STL; the script checks that every edge joins exactly two triangles in opposite directions (a
closed, consistently oriented surface) and that the volume by the divergence theorem is the
block's less the bore's.

    python3 scripts/pipe-stl.py > examples/pipe.stl

The same points build each section: point k of the bore at angle 2 pi k / 128 and, on the same ray,
point k of the square. A multiple of 8 puts rays through the square's corners, so the outer points
trace the square exactly; the end caps are the quads between the two rings.
"""
import math

N = 128        # sides of the bore's polygon (a multiple of 8)
R = 1.0        # bore radius
A = 1.25       # half the block's side
L = 10.0       # length along x

ring = []
for k in range(N):
    t = 2 * math.pi * k / N
    c, s = math.cos(t), math.sin(t)
    out = A / max(abs(c), abs(s))
    ring.append(((R * c, R * s), (out * c, out * s)))


def p(x, yz):
    return (x, yz[0], yz[1])


tris = []
for k in range(N):
    (i0, o0), (i1, o1) = ring[k], ring[(k + 1) % N]
    # The bore (facing the axis), the block's outside, then the caps at x = 0 and x = L.
    tris += [(p(0, i0), p(L, i0), p(L, i1)), (p(0, i0), p(L, i1), p(0, i1))]
    tris += [(p(0, o0), p(L, o1), p(L, o0)), (p(0, o0), p(0, o1), p(L, o1))]
    tris += [(p(0, i0), p(0, o1), p(0, o0)), (p(0, i0), p(0, i1), p(0, o1))]
    tris += [(p(L, i0), p(L, o0), p(L, o1)), (p(L, i0), p(L, o1), p(L, i1))]


def sub(a, b):
    return tuple(x - y for x, y in zip(a, b))


def cross(u, v):
    return (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])


def check(tris, volume):
    edges = {}
    for t in tris:
        for a, b in ((t[0], t[1]), (t[1], t[2]), (t[2], t[0])):
            edges[(a, b)] = edges.get((a, b), 0) + 1
    for (a, b), n in edges.items():
        assert n == 1 and edges.get((b, a)) == 1, ("open or doubled edge", a, b)
    v = sum(sum(x * y for x, y in zip(t[0], cross(t[1], t[2]))) for t in tris) / 6
    assert abs(v - volume) < 1e-9 * volume, (v, volume)


bore = N / 2 * R * R * math.sin(2 * math.pi / N)
check(tris, (4 * A * A - bore) * L)

print("solid pipe")
for a, b, c in tris:
    n = cross(sub(b, a), sub(c, a))
    m = math.sqrt(sum(x * x for x in n))
    print("  facet normal %.6g %.6g %.6g" % tuple(x / m for x in n))
    print("    outer loop")
    for v in (a, b, c):
        print("      vertex %.9g %.9g %.9g" % v)
    print("    endloop")
    print("  endfacet")
print("endsolid pipe")
