"""A store seen while it lives: following a live writer (follower.py), snapshots (snapshot.py),
the store's status and stats, consumer progress.
"""
