"""The on-disk files and their primitives: the CommitLog record (message.py), CommitLog segments
(commitlog.py), segment files (mappedfile.py), ConsumeQueue units (consumequeue.py), IndexFiles
(indexfile.py), the checkpoint, config/*.json, CRC-32C, Java hashes and UNIQ_KEY ids.

Each byte-level fact has one home here (docs/format.md). Imports nothing of engine/ but
``engine.errors`` and this package (tests/test_layers.py).
"""
