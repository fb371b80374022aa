"""videogen's job service: the OpenAI-compatible `/v1/videos` API, its SQL job store and output storage.

    from .app import create_app
    from .settings import ServiceSettings
    app = create_app(ServiceSettings())

This package never imports torch: the API process stays light, and the renders run in
`workers/` (an in-process thread in embedded mode, Celery processes in a fleet).
"""
