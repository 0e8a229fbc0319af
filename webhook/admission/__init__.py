"""The AdmissionReview v1 wire format and the service that answers it with the engine.

No web framework here: the Flask app (``webhook.serving.app``) only moves bytes in and out.
"""
