"""Workers of the job service: thin wrappers over `videogen.render()`.

`workers.jobs.run_job` is the one job-execution function. The embedded runner
(`workers.embedded.EmbeddedWorker`, a thread beside the API) and the Celery task
(`workers.celery_app.render_job`) only differ in how they learn of a job id.
"""
