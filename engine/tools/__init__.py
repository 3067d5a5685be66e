"""Offline tools above the store: verify and recover (verify.py). Nothing else in engine/ imports
this package (``engine`` itself re-exports ``verify_store`` and ``recover_store`` lazily).
"""
