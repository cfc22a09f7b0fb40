"""Sphinx configuration of the course site: the lessons with their executed outputs.

Built by ``make site`` (docs/build.py): it runs the lessons (or takes already executed copies),
writes the syllabus page from effkit/syllabus.py, and calls sphinx-build on docs/_src. myst-nb
renders the notebooks *without* executing them again (nb_execution_mode = "off").
"""

project = "effkit — efficient deep-learning training"
author = "the effkit course"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # docs/build.py executed them (or reused the test suite's runs)
nb_merge_streams = True
myst_enable_extensions = ["dollarmath"]
html_theme = "sphinx_book_theme"
html_title = "effkit course"
html_theme_options = {"show_toc_level": 2, "use_download_button": True}
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]
