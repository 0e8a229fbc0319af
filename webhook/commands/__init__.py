"""One module per ``gpu-webhook`` command, found by ``webhook.cli`` at start-up."""
