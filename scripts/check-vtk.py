#!/usr/bin/env python3
"""Reads thelma's VTK outputs with VTK's own readers and checks them: every array (those
`output.fields` names) of the expected size, no reader error, and (given two folders) that a
gathered run and a run written in pieces hold the same arrays, units and values.

    python3 scripts/check-vtk.py OUT_DIR [PIECES_DIR]      (needs `pip install vtk`)
"""
import glob
import os
import sys

import vtk
from vtk.util.numpy_support import vtk_to_numpy


# Every array output.fields can name, with its number of components.
COMPONENTS = {"density": 1, "velocity": 3, "speed": 1, "pressure": 1, "solid": 1, "vorticity": 3, "q_criterion": 1}


class Errors:
    def __init__(self):
        self.seen = []

    def __call__(self, obj, event):
        self.seen.append(event)


def read(path):
    reader = {
        ".vti": vtk.vtkXMLImageDataReader,
        ".pvti": vtk.vtkXMLPImageDataReader,
    }[os.path.splitext(path)[1]]()
    errors = Errors()
    reader.AddObserver("ErrorEvent", errors)
    reader.AddObserver("WarningEvent", errors)
    reader.SetFileName(path)
    reader.Update()
    if errors.seen:
        sys.exit(f"{path}: the reader reported {errors.seen}")
    img = reader.GetOutput()
    cells = img.GetNumberOfCells()
    data = img.GetCellData()
    if data.GetNumberOfArrays() == 0:
        sys.exit(f"{path}: no arrays")
    arrays = {}
    for k in range(data.GetNumberOfArrays()):
        a = data.GetArray(k)
        name = a.GetName()
        if name not in COMPONENTS:
            sys.exit(f"{path}: unexpected array {name}")
        if a.GetNumberOfTuples() != cells or a.GetNumberOfComponents() != COMPONENTS[name]:
            sys.exit(f"{path}: array {name} of the wrong shape")
        info = a.GetInformation()
        units = info.Get(vtk.vtkDataArray.UNITS_LABEL()) if info.Has(vtk.vtkDataArray.UNITS_LABEL()) else None
        arrays[name] = (vtk_to_numpy(a), units)
    return img.GetDimensions(), img.GetSpacing(), arrays


def series(folder):
    files = sorted(glob.glob(os.path.join(folder, "fields_*.vti")) + glob.glob(os.path.join(folder, "fields_*.pvti")))
    # Pieces of a .pvti are read through their index.
    return [f for f in files if not (f.endswith(".vti") and os.path.exists(f.rsplit("_", 1)[0] + ".pvti"))]


def main():
    whole = series(sys.argv[1])
    if not whole:
        sys.exit(f"no fields_*.vti or .pvti in {sys.argv[1]}")
    for f in whole:
        dims, spacing, arrays = read(f)
        a = {name: values for name, (values, _) in arrays.items()}
        if "velocity" in a and "speed" in a:
            speed = (a["velocity"] ** 2).sum(axis=1) ** 0.5
            if abs(speed - a["speed"]).max() > 1e-6 * max(1.0, speed.max()):
                sys.exit(f"{f}: speed is not |velocity|")
        listed = ", ".join(f"{name} [{units}]" if units else name for name, (_, units) in arrays.items())
        print(f"{f}: {dims[0]-1}x{dims[1]-1}x{dims[2]-1} cells, spacing {spacing[0]:g}: {listed}")
    if len(sys.argv) > 2:
        pieces = series(sys.argv[2])
        if [os.path.basename(p).split(".")[0] for p in pieces] != [os.path.basename(p).split(".")[0] for p in whole]:
            sys.exit("the two folders hold different steps")
        for w, p in zip(whole, pieces):
            a, b = read(w)[2], read(p)[2]
            if list(a) != list(b):
                sys.exit(f"{w} and {p} hold different arrays")
            for name in a:
                if a[name][1] != b[name][1] or (a[name][0] != b[name][0]).any():
                    sys.exit(f"{w} and {p} differ in {name}")
            print(f"{p}: equal to {os.path.basename(w)}")
    print("ok")


main()
