"""The user's code as the running program shows it: which file is whose, and a frame's or traceback's user lines.

``code_owner`` decides whose code a file is - the user's, JAX's, jaxmagic's or an installed library's - by what
its module is, wherever it was installed; ``source`` walks frames and tracebacks to the user's lines
(``SourceLine``s of the report model), names a notebook cell as the notebook does and reads the expression a line
wrote. This layer inspects the live program (frames, ``sys.modules``, installed metadata, the running shell) and
imports only ``jaxmagic.report``: the model stays data, and everything above asks here.
"""
