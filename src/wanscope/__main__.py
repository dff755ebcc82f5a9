from wanscope.cli import main

main()
