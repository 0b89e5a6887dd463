"""`fork`: analyse one document from several angles in parallel branches, then join them into a summary.
The shared document is prefilled once; the branches decode together in one batch.

    python examples/fork_parallel_analyses.py"""
import sglite as sgl

ANGLES = ["financial health", "market risks", "management outlook"]


@sgl.function
def analyse(s, document):
    s += sgl.system("You are a concise financial analyst.")
    with s.user():
        s += f"Document:\n{document}\n"
    forks = s.fork(len(ANGLES))
    for f, angle in zip(forks, ANGLES):
        f += sgl.user(f"In one sentence, assess the {angle}.")
        f += sgl.assistant(sgl.gen("analysis", max_tokens=48, stop="\n"))
    forks.join()
    with s.user():
        s += "Combine these notes into a two-sentence summary:\n"
        for angle, note in zip(ANGLES, s["analysis"]):
            s += f"- {angle}: {note}\n"
    s += sgl.assistant(sgl.gen("summary", max_tokens=80))


DOC = ("Northwind Robotics reported Q3 revenue of $412.6 million, up 18% year over year, and net income of "
       "$37.9 million. It expects Q4 revenue of $430-445 million but warned about component shortages and "
       "slower European logistics spending.")

if __name__ == "__main__":
    s = analyse.run(document=DOC, backend=sgl.Runtime(), temperature=0)
    for angle, note in zip(ANGLES, s["analysis"]):
        print(f"[{angle}] {note}")
    print("\nSummary:", s["summary"])
