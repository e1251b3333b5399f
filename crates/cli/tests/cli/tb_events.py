"""Reads TensorBoard event files with the real `tensorboard` package and prints what it sees.

Usage: python tb_events.py EVENT_DIR. Prints one JSON object: `scalars` (tag -> [[step, value]]),
`texts` (tag -> [[step, text, html]], the html as the text plugin renders it), `text_tags`
(the tags the text plugin claims) and `files` (the event files TensorBoard found).
"""

import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import io_wrapper
from tensorboard.plugins.text import text_plugin
from tensorboard.util import tensor_util


def main(path):
    acc = ea.EventAccumulator(
        path, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0}, purge_orphaned_data=True
    )
    acc.Reload()
    tags = acc.Tags()
    out = {"scalars": {}, "texts": {}}
    for tag in tags["scalars"]:
        out["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
    for tag in tags["tensors"]:
        rows = []
        for e in acc.Tensors(tag):
            array = tensor_util.make_ndarray(e.tensor_proto)
            text = array.item().decode("utf-8")
            rows.append([e.step, text, text_plugin.text_array_to_html(array, True)])
        out["texts"][tag] = rows
    out["text_tags"] = sorted(acc.PluginTagToContent("text").keys())
    out["files"] = sorted(
        f for f in os.listdir(path) if io_wrapper.IsSummaryEventsFile(os.path.join(path, f))
    )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
