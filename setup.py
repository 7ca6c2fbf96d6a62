"""Package layout only (the rest is pyproject.toml): every package under src/, and examples/ as
`nnapi.examples` (the main job and its model travel in the wheel). pyproject.toml alone cannot map a
sub-package to a folder outside its parent while also discovering the others."""
from setuptools import find_namespace_packages, setup

setup(packages=find_namespace_packages("src", include=["nnapi", "nnapi.*"]) + ["nnapi.examples", "nnapi.examples.models"],
      package_dir={"": "src", "nnapi.examples": "examples"})
