#!/usr/bin/env python3
"""Writes examples/sphere.stl: the unit sphere as an icosahedron subdivided twice (320 triangles,
outward-facing, ASCII STL). Its volume is 0.966 of the sphere's (the inscribed polyhedron).

    python3 scripts/sphere-stl.py > examples/sphere.stl
"""
import math

g = (1 + 5 ** 0.5) / 2
V = [(-1, g, 0), (1, g, 0), (-1, -g, 0), (1, -g, 0), (0, -1, g), (0, 1, g), (0, -1, -g),
     (0, 1, -g), (g, 0, -1), (g, 0, 1), (-g, 0, -1), (-g, 0, 1)]
F = [(0, 11, 5), (0, 5, 1), (0, 1, 7), (0, 7, 10), (0, 10, 11), (1, 5, 9), (5, 11, 4),
     (11, 10, 2), (10, 7, 6), (7, 1, 8), (3, 9, 4), (3, 4, 2), (3, 2, 6), (3, 6, 8), (3, 8, 9),
     (4, 9, 5), (2, 4, 11), (6, 2, 10), (8, 6, 7), (9, 8, 1)]


def unit(p):
    n = math.sqrt(sum(c * c for c in p))
    return tuple(c / n for c in p)


tris = [tuple(unit(V[i]) for i in f) for f in F]
for _ in range(2):
    mid = lambda a, b: unit(tuple((x + y) / 2 for x, y in zip(a, b)))
    tris = [t for a, b, c in tris for t in
            ((a, mid(a, b), mid(c, a)), (b, mid(b, c), mid(a, b)), (c, mid(c, a), mid(b, c)),
             (mid(a, b), mid(b, c), mid(c, a)))]

print("solid sphere")
for a, b, c in tris:
    u = [b[k] - a[k] for k in range(3)]
    v = [c[k] - a[k] for k in range(3)]
    n = unit((u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]))
    print("  facet normal %.6f %.6f %.6f" % n)
    print("    outer loop")
    for p in (a, b, c):
        print("      vertex %.6f %.6f %.6f" % p)
    print("    endloop")
    print("  endfacet")
print("endsolid sphere")
