"""Offline tools above the store: verify and recover (the verify/ package). Nothing else in engine/ imports
this package (``engine`` itself re-exports ``verify_store`` and ``recover_store`` lazily).
"""
