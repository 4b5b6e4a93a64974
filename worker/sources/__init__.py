"""Where a job's tool calls can run besides the caller: one ToolSource per module
(see ``worker/toolbox.py``)."""
