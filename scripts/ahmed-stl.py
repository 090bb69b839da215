#!/usr/bin/env python3
"""Writes examples/ahmed.stl: the Ahmed body (Ahmed, Ramm & Faltin 1984, SAE 840300), the bluff
body of car aerodynamics, with a 25 degree rear slant, in millimetres:

  - 1044 long (x, the nose at x = 0 facing -x), 389 wide (y, centred on 0), 288 high;
  - the four front edges rounded with a radius of 100 (16 facets a quarter circle; each section is a
    rectangle inset by 100 - sqrt(100^2 - (100 - x)^2) on all four sides, so the flat nose is
    189 x 88 and the edges along x stay sharp);
  - the rear slant at 25 degrees over 222 along the slanted face (201.2 along x, 93.8 down), then
    the vertical base;
  - four cylindrical stilts 30 across and 50 tall (16 facets each), so the body's underside is at
    z = 50 and the stilts stand on z = 0, the ground. Their centres are 163 and 633 behind the
    nose and 163.5 either side of the centre plane (the positions vary between descriptions of the
    model; they hardly matter to the flow).

The frontal area, without the stilts, is 389 x 288 mm = 0.112 m^2. The body and each stilt are
closed, consistently oriented surfaces (the script checks that every edge joins two triangles in
opposite directions); a stilt's top face lies on the body's underside, which the voxeliser's ray
parity counts as one solid. 404 triangles, outward-facing, ASCII STL.

    python3 scripts/ahmed-stl.py > examples/ahmed.stl
"""
import math

L, W, H = 1044.0, 389.0, 288.0    # length, width, height of the body
R = 100.0                         # radius of the front edges
SLANT, PHI = 222.0, 25.0          # the slanted face's length and angle
CLEAR, STILT = 50.0, 15.0         # the stilts' height (ground clearance) and radius
STILTS = [(x, y) for x in (163.0, 633.0) for y in (-163.5, 163.5)]
ARC, ROUND = 16, 16               # facets of the front quarter circles and of each stilt

drop = SLANT * math.sin(math.radians(PHI))
run = SLANT * math.cos(math.radians(PHI))

# Sections along x: (x, half width, bottom, top).
sections = []
for j in range(ARC + 1):
    a = math.pi / 2 * j / ARC
    e = R * (1 - math.sin(a)) if j < ARC else 0.0
    sections.append((R * (1 - math.cos(a)), W / 2 - e, CLEAR + e, CLEAR + H - e))
sections.append((L - run, W / 2, CLEAR, CLEAR + H))
sections.append((L, W / 2, CLEAR, CLEAR + H - drop))


def corners(s):
    """The section's corners, counter-clockwise seen from +x (y to the right, z up)."""
    x, w, lo, hi = s
    return [(x, -w, lo), (x, w, lo), (x, w, hi), (x, -w, hi)]


def quad(a, b, c, d):
    return [(a, b, c), (a, c, d)]


tris = []
for s0, s1 in zip(sections, sections[1:]):
    c0, c1 = corners(s0), corners(s1)
    for k in range(4):
        tris += quad(c0[k], c0[(k + 1) % 4], c1[(k + 1) % 4], c1[k])
f, b = corners(sections[0]), corners(sections[-1])
tris += quad(f[0], f[3], f[2], f[1]) + quad(b[0], b[1], b[2], b[3])
body = len(tris)

for xs, ys in STILTS:
    ring = [(xs + STILT * math.cos(2 * math.pi * k / ROUND),
             ys + STILT * math.sin(2 * math.pi * k / ROUND)) for k in range(ROUND)]
    for k in range(ROUND):
        (x0, y0), (x1, y1) = ring[k], ring[(k + 1) % ROUND]
        tris += quad((x0, y0, 0.0), (x1, y1, 0.0), (x1, y1, CLEAR), (x0, y0, CLEAR))
        tris += [((xs, ys, 0.0), (x1, y1, 0.0), (x0, y0, 0.0)),
                 ((xs, ys, CLEAR), (x0, y0, CLEAR), (x1, y1, CLEAR))]


def sub(a, b):
    return tuple(x - y for x, y in zip(a, b))


def cross(u, v):
    return (u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0])


def volume(tris):
    return sum(sum(x * y for x, y in zip(t[0], cross(t[1], t[2]))) for t in tris) / 6


def check(tris, expected, tolerance):
    edges = {}
    for t in tris:
        for a, b in ((t[0], t[1]), (t[1], t[2]), (t[2], t[0])):
            edges[(a, b)] = edges.get((a, b), 0) + 1
    for (a, b), n in edges.items():
        assert n == 1 and edges.get((b, a)) == 1, ("open or doubled edge", a, b)
    v = volume(tris)
    assert abs(v - expected) < tolerance * expected, (v, expected)


# The body's volume: the box, less the rounded edges (the integrals of the inset e(x) and of e(x)^2
# over the nose) and the wedge under the slant; the facets take a little more off.
rounding = 2 * (W + H) * R * R * (1 - math.pi / 4) - 4 * R ** 3 * (5 / 3 - math.pi / 2)
check(tris[:body], L * W * H - rounding - W * run * drop / 2, 1e-3)
stilt = ROUND / 2 * STILT * STILT * math.sin(2 * math.pi / ROUND) * CLEAR
for k in range(4):
    n = (len(tris) - body) // 4
    check(tris[body + k * n:body + (k + 1) * n], stilt, 1e-9)

print("solid ahmed")
for a, b, c in tris:
    n = cross(sub(b, a), sub(c, a))
    m = math.sqrt(sum(x * x for x in n))
    print("  facet normal %.6g %.6g %.6g" % tuple(x / m + 0.0 for x in n))
    print("    outer loop")
    for v in (a, b, c):
        print("      vertex %.9g %.9g %.9g" % v)
    print("    endloop")
    print("  endfacet")
print("endsolid ahmed")
