"""Exit 0 when every line of a requirements file is installed at a version it admits, else 1 (setup.sh then runs
pip). Prints the first unmet requirement. Uses only the standard library and pip's vendored ``packaging``."""
import sys
from importlib import metadata

try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors it
    from pip._vendor.packaging.requirements import Requirement


def unmet(path: str) -> str | None:
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return f"{req.name} is not installed"
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            return f"{req.name} {version} is installed, {line} is required"
    return None


if __name__ == "__main__":
    why = unmet(sys.argv[1])
    if why:
        print(f"[setup] {why}")
    sys.exit(1 if why else 0)
