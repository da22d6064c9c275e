"""Training: step-wise trainers, checkpointing that survives spot interruptions, warm-start retrains.

Submodules are imported where used (``trainers``, ``checkpointing``, ``runner``) so importing this package
stays cheap.
"""
