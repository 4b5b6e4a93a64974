"""The `toolq` command line, the front of the public package: ``cli`` (the parser, the service
subcommands found through the ``toolq.commands`` entry points, ``main``), ``console`` (`submit` and
`events` in a terminal), ``demo`` and ``serve_tools`` (`tools serve`).

Nothing below imports this package: a command handler anywhere raises ``toolq.errors.CommandError``
and says a validation error with ``toolq.field_errors.validation_message``.
"""
