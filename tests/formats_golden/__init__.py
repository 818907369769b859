"""Golden files of the public formats (tests/test_formats_stable.py) and the script that writes them."""
