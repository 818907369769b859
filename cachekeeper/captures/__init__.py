"""Captured sets: the files a serving runtime compiled that no prebuilt entry covered, listed in the hydrated
dir and written back to the store as a captured set of this toolchain (`cachekeeper capture`)."""
