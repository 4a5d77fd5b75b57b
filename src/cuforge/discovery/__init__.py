"""Discovery: the torch extensions any research checkout vendors (3DGS, 2DGS, GOF, ...), found
by reading it, and turned into in-memory recipes that go through the same pipeline as
``recipes/*.toml``.

``buildfiles`` reads one folder's setup.py / pyproject.toml / CMakeLists.txt; ``submodules``
lists the checkout's git submodules and fetches the ones not checked out into cuforge's source
cache; ``scan`` walks the checkout; ``found`` turns what it found into recipes and a stack.
Nothing here writes into the user's tree."""
