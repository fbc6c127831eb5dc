"""The app's tabs: each module builds its own components and wires its own handlers (the only gradio code)."""
