"""The serving shell around the engine.

Flask app, gunicorn server and worker, TLS, health, metrics, logs, reloader, config.
"""
