"""The TRL configs the framework checks build leave nothing behind in the temporary directory."""

import subprocess
import sys


def test_a_trl_config_leaves_no_folder_behind(tmp_path):
    code = ("import os, tempfile\n"
            f"tempfile.tempdir = {str(tmp_path)!r}\n"
            "from trl import DPOConfig\n"
            "from tools.experiments.preference.trl_runs import trainer_arguments\n"
            "config = trainer_arguments(DPOConfig, per_device_train_batch_size=2, beta=0.1)\n"
            "assert os.path.isdir(config.output_dir), 'the trainer gets a real folder while it runs'\n"
            "print(config.output_dir)")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().startswith(str(tmp_path))
    assert list(tmp_path.glob("course-trl-*")) == []
