"""The model gateway: a coding-agent CLI's only way out of its sandbox, run by the harness on the
host. ``apis`` parses the three APIs the CLIs speak, ``sse`` their streamed answers,
``upstream`` forwards to the provider with the key only the host holds, ``server`` meters,
records and refuses, and ``scripted`` is the offline provider a ``scripted:`` model uses.
"""
