"""TrainCheck on the host: the diagnostic capability track.

The work itself runs in treatment-image containers through the in-container runner
(``python -m diagnostics``); these modules place trees there, call it, and turn what it
returns into pydantic records and reports.
"""
