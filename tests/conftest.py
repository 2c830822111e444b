"""Shared pytest setup.

The marker `scale`: a test of quality or of a whole-model round trip at the
size of a real model (SmolLM2: minutes of forward passes under the
sanitizers), whose C code also runs, on the same paths, in smaller tests.
`make asan` deselects these (-m "not scale") so the sanitizer run stays
short; `make test` runs everything, and `make asan-full` runs everything
under the sanitizers."""


def pytest_configure(config):
    config.addinivalue_line("markers", "scale: whole-model quality or round trip at real-model size; "
                                       "the sanitizer run (make asan) skips it")
