"""All of holdfast's benchmark code: the `make bench` runner (__main__), one
module a section, and mp/, the MicroPython side of the client comparison."""
