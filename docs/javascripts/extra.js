// A flag in running text never breaks inside its name (--max-batch-size, not --max- / batch-size): each flag and
// each short word of an inline code span is kept whole; lines still break at its spaces, and long words (URLs, paths)
// where the browser breaks them. The text copied is unchanged.
document$.subscribe(() => {
  for (const code of document.querySelectorAll(".md-typeset :not(pre) > code")) {
    if (code.children.length || !code.textContent.includes("-")) continue;
    code.replaceChildren(...code.textContent.split(/(\s+)/).filter(Boolean).map((part) => {
      if (/^\s+$/.test(part) || !(part.startsWith("-") || part.length <= 24)) return document.createTextNode(part);
      const word = document.createElement("span");
      word.className = "zoo-word";
      word.textContent = part;
      return word;
    }));
  }
});
