"""Code that runs inside the framework stacks (case scripts import it): the standard library only, and
nothing of the suite outside this folder."""
