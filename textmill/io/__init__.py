"""Storage that every room uses: atomic writes, JSON records read back with damage reported, file
fingerprints and JSON lines (`files`). Imports nothing else of textmill."""
