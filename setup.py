"""Maps the top-level runtime/ and kernels/ folders into the sglite namespace.

pyproject.toml holds the metadata; this file only computes the package list, since setuptools'
static config cannot express "every subpackage of runtime/, installed as sglite.runtime.*".
"""
from setuptools import find_packages, setup

PACKAGE_DIRS = {"sglite": "sglite", "sglite.runtime": "runtime", "sglite.kernels": "kernels"}

packages = []
for name, folder in PACKAGE_DIRS.items():
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(folder)]

# kernels built on the machine at first use (kernels/native.py) ship as C source and its header
setup(packages=packages, package_dir=PACKAGE_DIRS, package_data={"sglite.kernels": ["*.c", "*.h"]})
