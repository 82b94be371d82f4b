from kmemscope.cli import main

main()
