# attnlens before numpy, as in a notebook that imports it first: numpy's OpenBLAS then runs the
# kernels attnlens-cli chooses, so the module's numbers equal the CLI's (attnlens/__init__.py).
import attnlens  # noqa: F401
