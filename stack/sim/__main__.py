from .cli import app

app(prog_name="python -m stack.sim")
