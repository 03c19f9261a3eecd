"""Reading trajectories: the terminal viewer and the HTML page."""
