"""The ``--gpu`` help's preset names: listed from the package folder, or through importlib.resources when the package
cannot be listed as a folder (a zipped install), the same names either way."""

import os
import types

from astra_gpu_model import names


def test_the_names_are_the_presets_yaml_files():
    found = names.preset_names()
    assert found == sorted(found) and "H100-SXM5-80GB" in found and names.DEFAULT_GPU in found
    assert found == sorted(p.name[:-5] for p in names.preset_dir().iterdir() if p.name.endswith(".yaml"))


def test_a_package_that_is_not_a_folder_lists_them_through_importlib_resources(monkeypatch):
    def not_a_folder(path):
        raise NotADirectoryError(path)

    expected = names.preset_names()
    monkeypatch.setattr(names, "os", types.SimpleNamespace(listdir=not_a_folder, path=os.path))
    assert names.preset_names() == expected
