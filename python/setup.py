"""Build hook: ship the snapshot converter (tools/torch_snapshot_to_csv.py of
the repository) inside the package, so cubemem.replay() reads PyTorch memory
snapshots when installed with pip. Everything else is in pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "torch_snapshot_to_csv.py")


class BuildPy(build_py):
    def run(self):
        super().run()
        if os.path.exists(TOOL):
            dest = os.path.join(self.build_lib, "cubemem", "_snapshot_tool.py")
            shutil.copyfile(TOOL, dest)


setup(cmdclass={"build_py": BuildPy})
