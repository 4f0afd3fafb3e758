"""Everything that reads an output tree: its layout, the records harbor and the arms write, the
scoring rules, the run model, and the reports built on it. Nothing here changes the machine; it
imports only ``runner.errors``, ``runner.secrets``, ``modes`` and itself.
"""
