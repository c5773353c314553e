"""Build hook: the wheel carries the recipe folders `sweeps/` and `evals/`.

They stay at the top of the repository (artifacts a paper cites); a wheel copies them
to `lze_bench/recipes/{sweeps,evals}/`, where `lze_bench.config` looks for them, so a
non-editable install finds the built-in recipes from any directory. Editable installs
read the checkout's folders directly.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RECIPE_FOLDERS = ("sweeps", "evals")


class BuildWithRecipes(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder in RECIPE_FOLDERS:
            target = Path(self.build_lib) / "lze_bench" / "recipes" / folder
            self.mkpath(str(target))
            for recipe in sorted(Path(folder).glob("*.yaml")):
                self.copy_file(str(recipe), str(target / recipe.name))


setup(cmdclass={"build_py": BuildWithRecipes})
