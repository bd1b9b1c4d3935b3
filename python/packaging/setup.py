"""setuptools hooks the declarative pyproject.toml cannot express: the wheel carries
prebuilt native code (so it is tagged for this interpreter and platform, not "any"), and
the CLI binary keeps its executable bit (setuptools copies package data without modes)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class BinaryDistribution(Distribution):
    """Native modules built by CMake, not by setuptools: still a platform wheel."""

    def has_ext_modules(self) -> bool:
        return True


class BuildPyKeepModes(build_py):
    """Copies package data like build_py, then restores the source files' permissions, and
    puts pdkv-sglang.pth beside the package (site-packages runs it at interpreter start:
    the sglang backend name in processes that never load sglang's plugins)."""

    def run(self) -> None:
        super().run()
        pth = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pdkv-sglang.pth")
        self.copy_file(pth, os.path.join(self.build_lib, "pdkv-sglang.pth"))

    def build_package_data(self) -> None:
        super().build_package_data()
        for _package, src_dir, build_dir, filenames in self.data_files:
            for name in filenames:
                mode = os.stat(os.path.join(src_dir, name)).st_mode
                os.chmod(os.path.join(build_dir, name), mode)


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyKeepModes})
