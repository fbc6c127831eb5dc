"""Serving one model to many browser sessions: the fair lock, the session store, model turns, replay and model
loading. Framework-free (no gradio): the app's tabs call these."""
